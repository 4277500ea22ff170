// Package ownerid makes the values that name a lock's holder: 128 random bits
// in hex, then ";" and the holder's description (its owner info).
package ownerid

import (
	"crypto/rand"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
)

// IDLen is the length of the random part of an owner value.
const IDLen = 32

// New returns a fresh owner value: 128 random bits in hex, then ";" and
// info when it is not empty. The whole value is what a lock's key holds and
// what release and renewal compare, so it never repeats.
func New(info string) (string, error) {
	if info == "" {
		return Prefixed()
	}
	return Prefixed(";", info)
}

// Prefixed returns 128 fresh random bits in hex followed by parts, in one
// allocation: a value that never repeats, whatever parts say (a reentrant
// hold's member is its hold id followed by its owner value).
func Prefixed(parts ...string) (string, error) {
	var raw [IDLen / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", errs.Errorf("dlock: reading crypto/rand for a random id: %w", err)
	}
	n := IDLen
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	const digits = "0123456789abcdef"
	for _, c := range raw {
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0xf])
	}
	for _, p := range parts {
		b.WriteString(p)
	}
	return b.String(), nil
}

// CallID returns 128 random bits in hex that name one call, so that a
// script can tell the same call sent again from a new one.
func CallID() (string, error) { return New("") }

// Split separates an owner value into its random id and its info.
func Split(v string) (id, info string) {
	id, info, _ = strings.Cut(v, ";")
	return id, info
}
