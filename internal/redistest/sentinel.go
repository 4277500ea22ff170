package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelCount is how many sentinels StartSentinel runs; with quorum 2
	// one of them may fail and failover still works.
	sentinelCount = 3
	// sentinelMasterName is the name the sentinels monitor the master under.
	sentinelMasterName = "dlock-test"
)

// SentinelGroup is a master, its replicas and three sentinels monitoring it
// under MasterName with quorum 2, down-after-milliseconds 1000 and
// failover-timeout 3000. Master and Replicas are the servers as started;
// after a failover ask CurrentMaster for the master of the moment.
type SentinelGroup struct {
	MasterName string    // the name the sentinels know the master by
	Master     *Server   // the master as started
	Replicas   []*Server // its replicas as started
	Sentinels  []*Server // three sentinel processes
}

// StartSentinel starts a master with the given number of replicas (as
// StartReplicated, with opts) and three sentinels, and returns once every
// sentinel sees the master, every replica with its link up, and the other two
// sentinels connected. The sentinels themselves have no password; with
// WithPassword they authenticate to the data servers with it. Everything is
// stopped by tb's cleanup.
//
// To keep tests fast the sentinels run with shorter internal periods than
// Redis's defaults (see sentinelTuning), and each is told in its
// configuration file about the replicas and the sentinels started before it.
func StartSentinel(tb testing.TB, replicas int, opts ...Option) *SentinelGroup {
	tb.Helper()
	cfg := newConfig(opts)
	master, reps := startReplicated(tb, replicas, cfg, nil)
	g := &SentinelGroup{MasterName: sentinelMasterName, Master: master, Replicas: reps}
	// One at a time, each told about the ones already running, which it can
	// reach at once; the earlier ones learn of it from its hello messages.
	// (Sentinels that all knew each other and started together would need a
	// port allocation for the whole group, and a first connection attempt
	// that misses a peer still starting is only retried a ping period later.)
	ids := make([]string, sentinelCount)
	for i := range ids {
		ids[i] = randomID()
		i := i
		g.Sentinels = append(g.Sentinels, startMany(tb, 1, func(_ int, dir string) (*Server, error) {
			return newServer(spec{
				dir:   dir,
				argv:  func(s *Server) []string { return g.sentinelArgs(s, cfg.password, ids[i], ids[:i]) },
				ready: tuneSentinel,
			})
		})[0])
	}
	if err := waitFor(syncTimeout, g.discovered); err != nil {
		tb.Fatalf("redistest: sentinels did not discover the group: %v", err)
	}
	return g
}

// sentinelArgs writes the configuration file of sentinel s, with myid, on
// its first start, and returns its arguments. Sentinel rewrites the file as
// it learns, so a Restart keeps the rewritten one. known are the IDs of the
// sentinels already running, which are g.Sentinels.
func (g *SentinelGroup) sentinelArgs(s *Server, password, myid string, known []string) []string {
	conf := filepath.Join(s.dir, "sentinel.conf")
	args := []string{conf, "--sentinel"}
	if s.proc != nil { // a restart
		return args
	}
	var c strings.Builder
	fmt.Fprintf(&c, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n", s.port)
	fmt.Fprintf(&c, "dir %q\nlogfile %q\n", s.dir, s.logPath())
	c.WriteString("shutdown-on-sigterm \"nosave now\"\n")
	fmt.Fprintf(&c, "sentinel myid %s\n", myid)
	name := g.MasterName
	fmt.Fprintf(&c, "sentinel monitor %s 127.0.0.1 %d 2\n", name, g.Master.Port())
	fmt.Fprintf(&c, "sentinel down-after-milliseconds %s 1000\n", name)
	fmt.Fprintf(&c, "sentinel failover-timeout %s 3000\n", name)
	fmt.Fprintf(&c, "sentinel parallel-syncs %s 1\n", name)
	if password != "" {
		fmt.Fprintf(&c, "sentinel auth-pass %s %q\n", name, password)
	}
	for _, r := range g.Replicas {
		fmt.Fprintf(&c, "sentinel known-replica %s 127.0.0.1 %d\n", name, r.Port())
	}
	for i, id := range known {
		fmt.Fprintf(&c, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", name, g.Sentinels[i].Port(), id)
	}
	// On error the sentinel fails to start and reports the missing file.
	_ = os.WriteFile(conf, []byte(c.String()), 0o644)
	return args
}

// sentinelTuning are the SENTINEL DEBUG settings every sentinel gets after it
// starts (they are not kept in its configuration file). Redis's defaults
// suit production, not tests: sentinels find each other by a hello every 2 s
// and refresh a replica's role every 10 s.
//
// The ping period stays at its default (1 s) on purpose: while the master is
// down, a replica is only eligible for promotion if its last INFO is younger
// than 5 ping periods, and that INFO comes once a second whatever the
// setting, so a ping period of 100 ms makes every failover abort with
// -failover-abort-no-good-slave.
var sentinelTuning = []string{
	"SENTINEL", "DEBUG",
	"publish-period", "200", // hello messages: discovery of sentinels
	"info-period", "1000", // INFO to replicas: role changes, a restarted old master
}

// tuneSentinel applies sentinelTuning to a sentinel that just started.
func tuneSentinel(s *Server) error {
	_, err := ctl(s.Addr(), "", sentinelTuning...)
	return err
}

// randomID returns 40 hex digits, the form of a Redis run ID.
func randomID() string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// discovered reports (as an error) whether some sentinel does not yet see the
// whole group healthy.
func (g *SentinelGroup) discovered() error {
	for _, s := range g.Sentinels {
		m, err := ctl(s.Addr(), "", "SENTINEL", "MASTER", g.MasterName)
		if err != nil {
			return err
		}
		mp := pairs(m)
		if mp["flags"] != "master" || mp["num-slaves"] != strconv.Itoa(len(g.Replicas)) ||
			mp["num-other-sentinels"] != strconv.Itoa(len(g.Sentinels)-1) {
			return fmt.Errorf("sentinel %s: master flags=%q num-slaves=%s num-other-sentinels=%s",
				s.Addr(), mp["flags"], mp["num-slaves"], mp["num-other-sentinels"])
		}
		reps, err := ctl(s.Addr(), "", "SENTINEL", "REPLICAS", g.MasterName)
		if err != nil {
			return err
		}
		list, _ := reps.([]any)
		for _, r := range list {
			rp := pairs(r)
			// master-link-status is only "ok" once the sentinel has parsed the
			// replica's INFO, which it needs to pick a replica to promote.
			if rp["flags"] != "slave" || rp["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replica %s flags=%q master-link-status=%q",
					s.Addr(), rp["name"], rp["flags"], rp["master-link-status"])
			}
		}
		others, err := ctl(s.Addr(), "", "SENTINEL", "SENTINELS", g.MasterName)
		if err != nil {
			return err
		}
		list, _ = others.([]any)
		for _, o := range list {
			if op := pairs(o); op["flags"] != "sentinel" {
				return fmt.Errorf("sentinel %s: sentinel %s flags=%q", s.Addr(), op["name"], op["flags"])
			}
		}
	}
	return nil
}

// SentinelAddrs returns the sentinels' addresses, as redis.FailoverOptions
// wants them.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// FailoverClient returns a new redis.NewFailoverClient over the sentinels,
// with the group's password. It is closed by tb's cleanup.
func (g *SentinelGroup) FailoverClient(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    g.MasterName,
		SentinelAddrs: g.SentinelAddrs(),
		Password:      g.Master.password,
	})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// CurrentMaster asks the sentinels (SENTINEL GET-MASTER-ADDR-BY-NAME, the
// first that answers) for the current master and returns its Server. It
// fails tb if no sentinel answers or the address is not one of the group's.
func (g *SentinelGroup) CurrentMaster(tb testing.TB) *Server {
	tb.Helper()
	var errs []error
	for _, s := range g.Sentinels {
		addr, err := g.masterAddr(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m := g.server(addr)
		if m == nil {
			tb.Fatalf("redistest: sentinel %s names master %s, which is not in the group", s.Addr(), addr)
		}
		return m
	}
	tb.Fatalf("redistest: no sentinel answered: %v", errors.Join(errs...))
	return nil
}

// WaitForFailover waits until every sentinel that answers (at least a quorum
// of two) reports a master other than old, and that server calls itself a
// master; it returns that server. It fails tb after timeout, which should
// allow a few seconds (down-after-milliseconds is 1000).
func (g *SentinelGroup) WaitForFailover(tb testing.TB, old *Server, timeout time.Duration) *Server {
	tb.Helper()
	var promoted *Server
	err := waitFor(timeout, func() error {
		var addr string
		answers := 0
		for _, s := range g.Sentinels {
			if !s.Running() {
				continue
			}
			a, err := g.masterAddr(s)
			if err != nil {
				continue
			}
			if a == old.Addr() {
				return fmt.Errorf("sentinel %s still reports %s", s.Addr(), a)
			}
			if addr != "" && a != addr {
				return fmt.Errorf("sentinels disagree: %s and %s", addr, a)
			}
			addr = a
			answers++
		}
		if answers < 2 {
			return fmt.Errorf("only %d sentinels answered", answers)
		}
		m := g.server(addr)
		if m == nil {
			return fmt.Errorf("sentinels name master %s, which is not in the group", addr)
		}
		if role, err := m.role(); err != nil || role != "master" {
			return fmt.Errorf("new master %s reports role %q (%v)", addr, role, err)
		}
		promoted = m
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: no failover away from %s: %v", old.Addr(), err)
	}
	return promoted
}

// masterAddr asks one sentinel for the master's address.
func (g *SentinelGroup) masterAddr(s *Server) (string, error) {
	v, err := ctl(s.Addr(), "", "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.MasterName)
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return "", fmt.Errorf("sentinel %s: unexpected reply %#v", s.Addr(), v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}

// server returns the group's data server at addr, or nil.
func (g *SentinelGroup) server(addr string) *Server {
	for _, s := range append([]*Server{g.Master}, g.Replicas...) {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}
