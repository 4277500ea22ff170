package bench

import (
	"encoding/json"
	"fmt"
	"os"
)

// InstructionsResult is what redis-server executed per uncontended
// lock+unlock pair of one target, at one goroutine, counted under
// valgrind's callgrind (TestServerInstructions, `make instructions`).
type InstructionsResult struct {
	Target  string
	Pairs   int     // pairs counted
	PerPair float64 // instructions per pair
}

// WriteInstructions writes rs as JSON to path.
func WriteInstructions(path string, rs []InstructionsResult) error {
	b, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadInstructions reads what WriteInstructions wrote to path.
func ReadInstructions(path string) ([]InstructionsResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []InstructionsResult
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}
