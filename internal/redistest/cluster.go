package redistest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/keyslot"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of masters and replicas on loopback ports. Roles
// change with failovers, so ask Masters, Replicas or MasterForSlot rather
// than relying on the order of Nodes.
type Cluster struct {
	Nodes    []*Server // every node; the first ones started as the masters
	password string
}

// StartCluster starts masters*(1+replicasPerMaster) cluster nodes
// (--cluster-node-timeout 2000) and makes them one cluster, as `redis-cli
// --cluster create --cluster-replicas replicasPerMaster` would: Nodes[0] to
// Nodes[masters-1] become masters with equal slot ranges, and each later
// node a replica of master i%masters. It returns once every node reports
// cluster_state:ok, all nodes agree on slots and roles, and every replica's
// replication stream flows. Everything is stopped by tb's cleanup. Automatic
// failover needs a majority of masters alive, so use at least 3 masters for
// tests that kill one.
//
// A fresh cluster takes about 2 s whatever the size: a master does not
// report cluster_state:ok until 2 s after it started (Redis's
// CLUSTER_WRITABLE_DELAY). It is built with CLUSTER commands, which overlap
// that delay, rather than `redis-cli --cluster create`, which sleeps.
func StartCluster(tb testing.TB, masters, replicasPerMaster int, opts ...Option) *Cluster {
	tb.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		tb.Fatalf("redistest: StartCluster(%d, %d): need at least one master", masters, replicasPerMaster)
	}
	cfg := newConfig(opts)
	n := masters * (1 + replicasPerMaster)
	c := &Cluster{password: cfg.password}
	c.Nodes = startMany(tb, n, func(_ int, dir string) (*Server, error) {
		sp := cfg.spec(dir)
		sp.cluster = true
		sp.argv = func(s *Server) []string {
			return cfg.serverArgs(s,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "2000",
				// Its own free port: the default (port+10000) may be taken or
				// even beyond 65535.
				"--cluster-port", strconv.Itoa(s.busPort),
			)
		}
		return newServer(sp)
	})
	if err := c.create(masters); err != nil {
		tb.Fatalf("redistest: create cluster: %v", err)
	}
	if err := waitFor(syncTimeout, func() error { return c.converged(masters) }); err != nil {
		tb.Fatalf("redistest: cluster did not converge: %v", err)
	}
	return c
}

// create does what `redis-cli --cluster create` does, polling instead of
// sleeping: slots to the masters, a distinct config epoch per node, MEET,
// then REPLICATE once every node knows every other.
func (c *Cluster) create(masters int) error {
	ids := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		id, err := c.nodeID(s)
		if err != nil {
			return err
		}
		ids[i] = id
		if i < masters {
			lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
			if _, err := ctl(s.Addr(), c.password, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
				return fmt.Errorf("ADDSLOTSRANGE %d %d on %s: %w", lo, hi, s.Addr(), err)
			}
		}
		// Distinct epochs, so no node has to win a collision later.
		if _, err := ctl(s.Addr(), c.password, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("SET-CONFIG-EPOCH on %s: %w", s.Addr(), err)
		}
	}
	// Every node meets every other: with MEETs from one node only, the others
	// learn of each other by gossip, which takes seconds.
	for i, a := range c.Nodes {
		for _, b := range c.Nodes[i+1:] {
			if _, err := ctl(a.Addr(), c.password, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(b.Port()), strconv.Itoa(b.busPort)); err != nil {
				return fmt.Errorf("CLUSTER MEET %s from %s: %w", b.Addr(), a.Addr(), err)
			}
		}
	}
	// A replica can only follow a master it knows.
	err := waitFor(syncTimeout, func() error {
		for _, s := range c.Nodes {
			view, err := c.nodesView(s)
			if err != nil {
				return err
			}
			known := 0
			for _, n := range view {
				if !n.flags["handshake"] && !n.flags["noaddr"] {
					known++
				}
			}
			if known != len(c.Nodes) {
				return fmt.Errorf("node %s knows %d of %d nodes", s.Addr(), known, len(c.Nodes))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := masters; i < len(c.Nodes); i++ {
		master := ids[(i-masters)%masters]
		if _, err := ctl(c.Nodes[i].Addr(), c.password, "CLUSTER", "REPLICATE", master); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string // ip:port, without the bus port
	flags  map[string]bool
	master string // the master's ID for a replica, "-" for a master
	slots  []string
}

func (n clusterNode) role() string {
	if n.flags["slave"] {
		return "slave"
	}
	return "master"
}

// owns reports whether slot is in one of n's slot ranges.
func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		if strings.HasPrefix(r, "[") { // a migration marker, not ownership
			continue
		}
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// nodesView runs CLUSTER NODES on s.
func (c *Cluster) nodesView(s *Server) ([]clusterNode, error) {
	text, err := ctlString(s.Addr(), c.password, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	for _, line := range splitLines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: malformed line %q", s.Addr(), line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: map[string]bool{}, master: f[3], slots: f[8:]}
		for _, fl := range strings.Split(f[2], ",") {
			n.flags[fl] = true
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// converged reports (as an error) whether some node does not yet see a
// healthy cluster with the same configuration as the others.
func (c *Cluster) converged(masters int) error {
	var first string
	for _, s := range c.Nodes {
		info, err := ctlString(s.Addr(), c.password, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": strconv.Itoa(clusterSlots),
			"cluster_slots_ok":       strconv.Itoa(clusterSlots),
			"cluster_known_nodes":    strconv.Itoa(len(c.Nodes)),
		} {
			if got := infoField(info, field); got != want {
				return fmt.Errorf("node %s: %s:%s, want %s", s.Addr(), field, got, want)
			}
		}
		view, err := c.nodesView(s)
		if err != nil {
			return err
		}
		var sig []string
		nmasters := 0
		for _, n := range view {
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr", "nofailover"} {
				if n.flags[bad] {
					return fmt.Errorf("node %s sees %s as %s", s.Addr(), n.addr, bad)
				}
			}
			if n.role() == "master" {
				nmasters++
			} else if n.master == "-" {
				return fmt.Errorf("node %s sees replica %s without a master", s.Addr(), n.addr)
			}
			sig = append(sig, n.id+" "+n.role()+" "+n.master+" "+strings.Join(n.slots, ","))
		}
		if nmasters != masters {
			return fmt.Errorf("node %s sees %d masters, want %d", s.Addr(), nmasters, masters)
		}
		sort.Strings(sig)
		if joined := strings.Join(sig, "\n"); first == "" {
			first = joined
		} else if joined != first {
			return fmt.Errorf("node %s disagrees with %s about the configuration", s.Addr(), c.Nodes[0].Addr())
		}
		if r, err := s.info("replication"); err != nil {
			return err
		} else if infoField(r, "role") == "slave" &&
			(infoField(r, "master_link_status") != "up" || infoField(r, "master_sync_in_progress") != "0") {
			return fmt.Errorf("replica %s: master_link_status:%s", s.Addr(), infoField(r, "master_link_status"))
		} else if infoField(r, "role") == "slave" {
			if err := nudgeAck(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Addrs returns the addresses of all nodes, as redis.ClusterOptions wants them.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client over all nodes (with the
// cluster's password). It is closed by tb's cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Password: c.password})
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Masters returns the nodes that currently call themselves masters (ROLE),
// skipping nodes that are down or paused, in the order of Nodes.
func (c *Cluster) Masters(tb testing.TB) []*Server {
	tb.Helper()
	return c.withRole(tb, "master")
}

// Replicas returns the nodes that currently call themselves replicas (ROLE),
// skipping nodes that are down or paused, in the order of Nodes.
func (c *Cluster) Replicas(tb testing.TB) []*Server {
	tb.Helper()
	return c.withRole(tb, "slave")
}

func (c *Cluster) withRole(tb testing.TB, want string) []*Server {
	tb.Helper()
	var out []*Server
	for _, s := range c.Nodes {
		if !s.answering() {
			continue
		}
		role, err := s.role()
		if err != nil {
			tb.Fatalf("redistest: ROLE on %s: %v", s.Addr(), err)
		}
		if role == want {
			out = append(out, s)
		}
	}
	return out
}

// answering reports whether s is running and not paused.
func (s *Server) answering() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited() && !s.paused
}

// MasterForSlot returns the master that serves slot, as that master itself
// reports it (the myself line of its CLUSTER NODES). It fails tb if no
// running node claims the slot.
func (c *Cluster) MasterForSlot(tb testing.TB, slot int) *Server {
	tb.Helper()
	s, _, err := c.ownerOf(slot)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// ownerOf returns the running master that claims slot, and its node ID.
func (c *Cluster) ownerOf(slot int) (*Server, string, error) {
	for _, s := range c.Nodes {
		if !s.answering() {
			continue
		}
		view, err := c.nodesView(s)
		if err != nil {
			return nil, "", err
		}
		for _, n := range view {
			if n.flags["myself"] && n.role() == "master" && n.owns(slot) {
				return s, n.id, nil
			}
		}
	}
	return nil, "", fmt.Errorf("no running master claims slot %d", slot)
}

// nodeID returns CLUSTER MYID of s.
func (c *Cluster) nodeID(s *Server) (string, error) {
	return ctlString(s.Addr(), c.password, "CLUSTER", "MYID")
}

// KeySlot returns the cluster hash slot of key (CRC16 of the key, or of its
// {hash tag}, modulo 16384), as CLUSTER KEYSLOT computes it.
func KeySlot(key string) int { return keyslot.Of(key) }
