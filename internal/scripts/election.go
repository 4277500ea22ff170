package scripts

import (
	_ "embed"

	"github.com/dlock-go/dlock/driver"
)

var (
	//go:embed election_proclaim.lua
	electionProclaim string
	//go:embed election_leader.lua
	electionLeader string
	//go:embed election_resign.lua
	electionResign string
)

// An election is a FairMutex's keys and a leader record beside them.
var (
	// ElectionProclaim publishes a leader's value (election_proclaim.lua).
	ElectionProclaim = driver.NewScript(electionProclaim)
	// ElectionLeader reads an election's leader (election_leader.lua).
	ElectionLeader = driver.NewScript(electionLeader)
	// ElectionResign withdraws a leader's record (election_resign.lua).
	ElectionResign = driver.NewScript(electionResign)
)
