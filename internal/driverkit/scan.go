package driverkit

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// scanCount is SCAN's COUNT hint: how many keys each round trip examines.
// Larger means fewer round trips over a big keyspace, each blocking the
// server a little longer. The go-redis driver uses the same.
const scanCount = 1000

// Scan implements driver.Scanner: one SCAN cursor loop on the server, or on
// a Cluster one on each master, concurrently. A Cluster client knows its
// replicas too, whose keys are copies, so each node it lists is asked its
// ROLE first and only masters are scanned.
func (d *Driver[C]) Scan(ctx context.Context, match string, each func(key string) bool) error {
	if !d.lib.Cluster {
		if err := d.scanNode(ctx, d.lib.Do, match, each); err != nil {
			settleDeadline(ctx, err)
			return fmt.Errorf("SCAN: %w", err)
		}
		return nil
	}

	// sctx stops the other nodes once each says stop or a node fails.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		stopped  bool
		firstErr error
		masters  int
	)
	// Masters are scanned concurrently; each must see one key at a time.
	visit := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && !each(key) {
			stopped = true
			cancel() // the other masters need not answer any more
		}
		return !stopped
	}
	// fail keeps the first failure and stops the other nodes. Failures
	// after each said stop are those of the cancellation.
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	nodes, err := d.lib.Nodes(ctx)
	if err != nil {
		settleDeadline(ctx, err)
		return fmt.Errorf("SCAN on the Cluster's nodes: %w", err)
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		n := n
		wg.Add(1)
		go func() {
			defer wg.Done()
			master, err := d.isMaster(sctx, n)
			if err != nil {
				fail(fmt.Errorf("ROLE on %s: %w", n.Addr, err))
				return
			}
			if !master {
				return
			}
			mu.Lock()
			masters++
			mu.Unlock()
			if err := d.scanNode(sctx, n.Do, match, visit); err != nil {
				fail(fmt.Errorf("SCAN on %s: %w", n.Addr, err))
			}
		}()
	}
	wg.Wait()
	switch {
	case firstErr != nil:
		settleDeadline(ctx, firstErr)
		return firstErr
	case masters == 0:
		// Nothing was scanned: not an empty keyspace but a client whose
		// view of the Cluster has no master (every one it knew demoted).
		return fmt.Errorf("none of the %d Cluster nodes the client knows is a master", len(nodes))
	}
	return nil
}

// isMaster reports whether node calls itself a master.
func (d *Driver[C]) isMaster(ctx context.Context, node Node[C]) (bool, error) {
	r := node.Do(ctx, d.lib.Role())
	if r.Err != nil {
		return false, r.Err
	}
	role, ok := r.Reply.([]any)
	if !ok || len(role) == 0 {
		return false, fmt.Errorf("unexpected reply to ROLE: %#v", r.Reply)
	}
	return role[0] == "master", nil
}

// scanNode runs one SCAN cursor loop through do to its end, or until visit
// says stop.
func (d *Driver[C]) scanNode(ctx context.Context, do func(context.Context, C) Result, match string, visit func(string) bool) error {
	var cursor uint64
	for {
		r := do(ctx, d.lib.Scan(cursor, match, scanCount))
		if r.Err != nil {
			return r.Err
		}
		next, keys, err := parseScan(r.Reply)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if !visit(k) {
				return nil
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// parseScan reads SCAN's reply, normalized: the next cursor, as a decimal
// string, and the keys.
func parseScan(reply any) (next uint64, keys []string, err error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) != 2 {
		return 0, nil, fmt.Errorf("unexpected reply to SCAN: %#v", reply)
	}
	cursor, ok := arr[0].(string)
	if !ok {
		return 0, nil, fmt.Errorf("unexpected cursor in the reply to SCAN: %#v", arr[0])
	}
	if next, err = strconv.ParseUint(cursor, 10, 64); err != nil {
		return 0, nil, fmt.Errorf("unexpected cursor in the reply to SCAN: %w", err)
	}
	list, ok := arr[1].([]any)
	if !ok {
		return 0, nil, fmt.Errorf("unexpected keys in the reply to SCAN: %#v", arr[1])
	}
	keys = make([]string, len(list))
	for i, k := range list {
		if keys[i], ok = k.(string); !ok {
			return 0, nil, fmt.Errorf("unexpected key in the reply to SCAN: %#v", k)
		}
	}
	return next, keys, nil
}
