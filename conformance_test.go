package dlock_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/conformance"
)

// TestConformance runs the suite every driver must pass over the built-in
// go-redis driver. The adapter modules run it over their client libraries.
func TestConformance(t *testing.T) {
	conformance.Run(t, newClient)
}
