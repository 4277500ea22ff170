package notify

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.Wrap(m)) }
