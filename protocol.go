package dlock

import (
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// releaseErr is a release script's error as Unlock reports it: its "not
// held" answer as notHeld reads it, which tells apart a release the Redis
// client sent more than once.
func releaseErr(r protocol.Release, err error) error {
	if err == errs.ErrNotHeld {
		return notHeld(&driver.Call{Resent: r.Resent})
	}
	return err
}
