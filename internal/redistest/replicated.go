package redistest

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// syncTimeout bounds waits for replication, sentinel discovery and cluster
// convergence.
const syncTimeout = 30 * time.Second

// Replicated is a master with replicas that follow it.
type Replicated struct {
	Master   *Server   // the master as started
	Replicas []*Server // its replicas, each with --replicaof the master
}

// StartReplicated starts a master and the given number of replicas of it
// (--replicaof, --replica-announce-ip 127.0.0.1) with the same options, and
// returns once every replica reports master_link_status:up with no sync in
// progress and has acknowledged a write (WAIT), so writes to the master reach
// the replicas at once. All of them are stopped by tb's cleanup.
func StartReplicated(tb testing.TB, replicas int, opts ...Option) *Replicated {
	tb.Helper()
	master, reps := startReplicated(tb, replicas, newConfig(opts), nil)
	return &Replicated{Master: master, Replicas: reps}
}

// startReplicated starts the master and its replicas and waits for them to be
// in sync. extra are added to every server's arguments.
func startReplicated(tb testing.TB, replicas int, cfg *config, extra []string) (*Server, []*Server) {
	tb.Helper()
	master := startMany(tb, 1, func(_ int, dir string) (*Server, error) {
		return newServer(cfg.spec(dir, extra...))
	})[0]
	replicaArgs := append([]string{
		"--replicaof", "127.0.0.1", strconv.Itoa(master.Port()),
		"--replica-announce-ip", "127.0.0.1",
	}, extra...)
	reps := startMany(tb, replicas, func(_ int, dir string) (*Server, error) {
		return newServer(cfg.spec(dir, replicaArgs...))
	})
	if err := waitFor(syncTimeout, func() error { return inSync(master, reps) }); err != nil {
		tb.Fatalf("redistest: replicas of %s not in sync: %v", master.Addr(), err)
	}
	return master, reps
}

// inSync reports (as an error) whether any replica is not yet attached to
// master with its replication stream flowing.
func inSync(master *Server, replicas []*Server) error {
	for _, r := range replicas {
		info, err := r.info("replication")
		if err != nil {
			return err
		}
		if infoField(info, "master_link_status") != "up" || infoField(info, "master_sync_in_progress") != "0" {
			return fmt.Errorf("replica %s: master_link_status:%s master_sync_in_progress:%s",
				r.Addr(), infoField(info, "master_link_status"), infoField(info, "master_sync_in_progress"))
		}
		if err := nudgeAck(r); err != nil {
			return err
		}
	}
	// A write, then WAIT on the same connection: it returns once every
	// replica has acknowledged that write, which proves the stream flows end
	// to end. PUBLISH is replicated but touches no key.
	c, err := dialCtl(master.Addr(), master.password, ctlTimeout)
	if err != nil {
		return err
	}
	defer c.close()
	if _, err := c.do("PUBLISH", "__redistest__:sync", "1"); err != nil {
		return err
	}
	v, err := c.do("WAIT", strconv.Itoa(len(replicas)), "100")
	if err != nil {
		return err
	}
	if n, _ := v.(int64); n < int64(len(replicas)) {
		return fmt.Errorf("WAIT on %s: %d of %d replicas acknowledged", master.Addr(), n, len(replicas))
	}
	return nil
}

// nudgeAck makes replica r acknowledge its replication offset to its master
// now. After a diskless full sync, Redis 7.0's master holds the replication
// stream back until the replica's first REPLCONF ACK, and the replica sends
// that from its once-a-second cron: without the nudge the first writes after
// a sync reach the replicas up to a second late. REPLCONF GETACK sends no
// reply, so a PING follows it to keep the connection in step.
func nudgeAck(r *Server) error {
	c, err := dialCtl(r.Addr(), r.password, ctlTimeout)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.send("REPLCONF", "GETACK", "*"); err != nil {
		return err
	}
	_, err = c.do("PING")
	return err
}
