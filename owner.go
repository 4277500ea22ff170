package dlock

import (
	"crypto/rand"
	"strings"
)

// ownerIDLen is the length of the random part of an owner value: 128 bits
// from crypto/rand, hex-encoded.
const ownerIDLen = 32

// newCallID returns 128 random bits in hex that name one call, so that a
// script can tell the same call sent again from a new one.
func newCallID() (string, error) { return newOwner("") }

// newOwner returns a fresh owner value: 128 random bits in hex, then ";" and
// the client's owner info when it has one. The whole value is what the lock
// key holds and what release and renewal compare, so it never repeats.
func newOwner(info string) (string, error) {
	var raw [ownerIDLen / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", errorf("dlock: reading crypto/rand for a random id: %w", err)
	}
	const digits = "0123456789abcdef"
	var b strings.Builder
	n := ownerIDLen
	if info != "" {
		n += 1 + len(info)
	}
	b.Grow(n)
	for _, c := range raw {
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0xf])
	}
	if info != "" {
		b.WriteByte(';')
		b.WriteString(info)
	}
	return b.String(), nil
}

// splitOwner separates an owner value into its random id and its info.
func splitOwner(owner string) (id, info string) {
	id, info, _ = strings.Cut(owner, ";")
	return id, info
}
