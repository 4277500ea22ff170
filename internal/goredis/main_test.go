package goredis

import (
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
