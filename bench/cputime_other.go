//go:build !unix

package bench

import "time"

// cpuTime is 0 where getrusage does not exist: the report then shows no
// client CPU figures. (The benchmark runs on Linux; this keeps the module
// building, for `go vet`, elsewhere.)
func cpuTime() time.Duration { return 0 }
