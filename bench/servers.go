package bench

import (
	"context"
	"errors"
	"time"
)

// Servers are the redis-server processes one scenario runs on: one, or
// several independent masters for Redlock. Their command counts are summed.
type Servers struct {
	Addrs  []string
	admins []*Admin
}

// NewServers connects an Admin to each address.
func NewServers(addrs ...string) *Servers {
	s := &Servers{Addrs: addrs}
	for _, a := range addrs {
		s.admins = append(s.admins, NewAdmin(a))
	}
	return s
}

// Close closes the admin connections.
func (s *Servers) Close() error {
	var errs []error
	for _, a := range s.admins {
		errs = append(errs, a.Close())
	}
	return errors.Join(errs...)
}

// Flush empties every server and its script cache.
func (s *Servers) Flush(ctx context.Context) error {
	for _, a := range s.admins {
		if err := a.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ResetStats zeroes every server's command counters.
func (s *Servers) ResetStats(ctx context.Context) error {
	for _, a := range s.admins {
		if err := a.ResetStats(ctx); err != nil {
			return err
		}
	}
	return nil
}

// CommandStats sums the servers' command counts since the last reset.
func (s *Servers) CommandStats(ctx context.Context) (CommandStats, error) {
	sum := CommandStats{}
	for _, a := range s.admins {
		cs, err := a.CommandStats(ctx)
		if err != nil {
			return nil, err
		}
		for k, v := range cs {
			sum[k] += v
		}
	}
	return sum, nil
}

// CPU sums the servers' CPU time so far.
func (s *Servers) CPU(ctx context.Context) (time.Duration, error) {
	var sum time.Duration
	for _, a := range s.admins {
		d, err := a.CPU(ctx)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// Version returns the first server's redis_version.
func (s *Servers) Version(ctx context.Context) (string, error) {
	return s.admins[0].Version(ctx)
}
