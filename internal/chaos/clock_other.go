//go:build !linux

package chaos

import "time"

var processStart = time.Now()

// Now returns a monotonic time in nanoseconds. Outside Linux it counts from
// this process's start, so stamps of different processes do not compare:
// scenarios with child processes are skipped there (see SystemWide).
func Now() int64 { return int64(time.Since(processStart)) }

// SystemWide reports whether Now's stamps from different processes compare
// directly.
const SystemWide = false
