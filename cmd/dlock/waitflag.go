package main

import (
	"fmt"
	"strconv"
	"time"
)

// waitFlag is --wait: a duration ("10s", "1m30s") or, as flock(1) takes
// it, a bare number of seconds ("10", "0.5").
type waitFlag struct{ d *time.Duration }

func (f waitFlag) String() string { return f.d.String() }

func (f waitFlag) Type() string { return "duration" }

func (f waitFlag) Set(s string) error {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 || secs > (1<<63-1)/float64(time.Second) {
			return fmt.Errorf("%s seconds is out of range", s)
		}
		*f.d = time.Duration(secs * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 10s or 1m30s, or a number of seconds: %q", s)
	}
	*f.d = d
	return nil
}
