// Package fence keeps values in Redis behind fencing tokens, so that a
// process that lost its lock without knowing it (paused by GC, swapped out,
// cut off by the network for longer than the lock's TTL) is refused instead
// of overwriting the work of the process that holds the lock now.
//
// Every grant of a dlock lock carries a token (Lease.Token) larger than
// every earlier token of the same lock. A Store remembers, next to each
// value, the highest token it has seen for it, and refuses any read or
// write with a lower one with an error matching ErrStaleToken:
//
//	lease, err := c.Mutex("stock:42").Lock(ctx)
//	...
//	_, err = store.Update(ctx, "stock:{42}", lease.Token(), func(old string, ok bool) (string, error) {
//		return decrement(old)
//	})
//	if errors.Is(err, fence.ErrStaleToken) {
//		// Our lock passed to someone else; nothing was written.
//	}
//
// Reads are fenced too, and raise the mark like writes do. Otherwise a
// read-modify-write still loses updates: the stale holder reads, the new
// holder reads and writes, and the stale holder's write (which would be
// refused) is not the only harm, since what it read and acted on elsewhere
// was already stale. Equal tokens are accepted, so one holder can read and
// write as often as it likes. Tokens are compared exactly as integers
// (never rounded), and must be positive: every dlock lease that has a token
// has one above 0, and 0 (a Redlock lease's, or a zero Lease's) is refused
// rather than accepted as a token that fences nothing.
//
// # Keys
//
// The mark of key K is MarkKey(K): K + ":fence" when K has a Redis Cluster
// hash tag, "{K}:fence" otherwise, so that both are in K's hash slot and
// one script reads and writes them together, on Redis Cluster too. A key
// that contains '}' but no hash tag is rejected (its mark could not share
// its slot): give it a tag, such as "{stock:42}". Hence K and "{K}" share
// one mark, and a value stored under a mark's name would overwrite it: use
// one spelling per key, and no value names ending in ":fence". The mark
// lives as long as the value: it takes the value's expiry (WithTTL), and a
// mark made by a read of an absent value expires after WithTTL too (or
// never, without it).
// Values are plain strings; other clients may read them with GET, but
// every write must go through the Store, or it bypasses the fence.
//
// # The same check in SQL
//
// A table row is fenced with a column holding the highest token that wrote
// it, checked in the statement itself so that the check and the write are
// one atomic step:
//
//	UPDATE stock SET qty = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// Zero rows updated means the token is stale (or the row is missing). Use
// "fence < $2" instead to let each grant write only once. A fenced read
// raises the column the same way and returns the row only when the token
// is not stale:
//
//	UPDATE stock SET fence = $1 WHERE id = $2 AND fence <= $1 RETURNING qty
//
// Leases of a Redlock carry no token (their Token is 0) and cannot be
// fenced; see the dlock package documentation.
package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// ErrStaleToken means the store has already seen a higher fencing token for
// the key: the caller's lock passed to someone else, and nothing was read
// or written. Errors returned by a Store match it with errors.Is and are a
// *StaleTokenError, which says which token won.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError is the error of a refused operation.
type StaleTokenError struct {
	Op      string // "Get" or "Set" (Update reports the one that failed)
	Key     string // the value's key, as passed to the Store (not its mark)
	Token   int64  // the caller's token
	Highest int64  // the highest token the store has seen for Key
}

// Error says which token was refused and which won.
func (e *StaleTokenError) Error() string {
	op := e.Op
	if op != "" {
		op += " "
	}
	return fmt.Sprintf("fence: %s%q: token %d is stale: the store has seen %d (the lock passed to a newer holder; nothing was read or written)",
		op, e.Key, e.Token, e.Highest)
}

// Is makes the error match ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

var (
	//go:embed get.lua
	getSrc string
	//go:embed set.lua
	setSrc string

	// Each runs by EVALSHA, and by EVAL when the server answers NOSCRIPT
	// (after SCRIPT FLUSH, a restart or a failover).
	getScript = redis.NewScript(getSrc)
	setScript = redis.NewScript(setSrc)
)

// Store reads and writes fenced values in Redis. It is safe for concurrent
// use, holds no resources of its own, and needs no closing.
type Store struct {
	rdb redis.Scripter
	ttl time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithTTL makes every value written by the Store expire d after its last
// write, along with its mark, and marks made by reads of absent values
// expire after d. d must be 0 or at least a millisecond. Default: 0, no
// expiry (values are kept until deleted, and so are their marks).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

// New returns a Store on rdb: a *redis.Client (standalone, or from
// redis.NewFailoverClient), a *redis.ClusterClient, or any wrapper with
// go-redis's Scripter methods. It returns an error matching
// dlock.ErrInvalidArgument for a nil client or an invalid option.
func New(rdb redis.Scripter, opts ...Option) (*Store, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("fence: New: %w: nil Redis client", dlock.ErrInvalidArgument)
	}
	s := &Store{rdb: rdb}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("fence: New: %w: nil Option", dlock.ErrInvalidArgument)
		}
		opt(s)
	}
	if s.ttl < 0 || (s.ttl > 0 && s.ttl < time.Millisecond) {
		return nil, fmt.Errorf("fence: WithTTL(%v): %w: must be 0 or at least 1ms", s.ttl, dlock.ErrInvalidArgument)
	}
	return s, nil
}

func isNil(rdb redis.Scripter) bool {
	switch c := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	}
	return false
}

// MarkKey returns the key that holds the highest token seen for key, in the
// same Cluster hash slot. It returns an error matching
// dlock.ErrInvalidArgument for an empty key, and for a key that contains
// '}' without a hash tag.
func MarkKey(key string) (string, error) {
	mark, err := markKey(key)
	if err != nil {
		return "", fmt.Errorf("fence: MarkKey %q: %w", key, err)
	}
	return mark, nil
}

// markKey is MarkKey with errors that do not name the operation.
func markKey(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", dlock.ErrInvalidArgument)
	}
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + ":fence", nil // the tag is the key's slot
		}
	}
	if strings.IndexByte(key, '}') >= 0 {
		return "", fmt.Errorf("%w: the key contains '}' but no hash tag, so its mark could not share its slot; give it a tag such as {name}", dlock.ErrInvalidArgument)
	}
	// Without a tag the whole key is hashed, and "{key}" tags the mark with
	// exactly that.
	return "{" + key + "}:fence", nil
}

// Get returns the value of key, with ok false when it does not exist,
// provided token is not lower than the highest token seen for key; it then
// records token as the highest when it is. It returns an error matching
// ErrStaleToken when the token is stale, dlock.ErrInvalidArgument for a
// token below 1 or a bad key, dlock.ErrKeyConflict when the key holds
// something that is not a string (or its mark no token), and Redis's error
// otherwise. Nothing is changed when it fails.
func (s *Store) Get(ctx context.Context, key string, token int64) (value string, ok bool, err error) {
	keys, err := s.keys("Get", key, token)
	if err != nil {
		return "", false, err
	}
	reply, err := getScript.Run(ctx, s.rdb, keys, strconv.FormatInt(token, 10), s.ttl.Milliseconds()).Result()
	if err != nil {
		return "", false, redisError("Get", key, err)
	}
	return parseGet(key, token, reply)
}

// parseGet reads get.lua's reply.
func parseGet(key string, token int64, reply any) (value string, ok bool, err error) {
	items, isArray := reply.([]any)
	if !isArray || len(items) == 0 {
		return "", false, unexpected(reply)
	}
	switch code, _ := items[0].(int64); {
	case code == 1 && len(items) == 1: // {1, nil}: Redis drops a trailing nil
		return "", false, nil
	case code == 1 && len(items) == 2:
		if items[1] == nil {
			return "", false, nil
		}
		if v, isString := items[1].(string); isString {
			return v, true, nil
		}
	case code == 0:
		return "", false, stale("Get", key, token, items)
	}
	return "", false, unexpected(reply)
}

// Set stores value at key, provided token is not lower than the highest
// token seen for key, and records token as the highest. With WithTTL the
// value and its mark expire after it; otherwise they have no expiry. Its
// errors are Get's.
func (s *Store) Set(ctx context.Context, key, value string, token int64) error {
	keys, err := s.keys("Set", key, token)
	if err != nil {
		return err
	}
	reply, err := setScript.Run(ctx, s.rdb, keys, strconv.FormatInt(token, 10), value, s.ttl.Milliseconds()).Result()
	if err != nil {
		return redisError("Set", key, err)
	}
	return parseSet(key, token, reply)
}

// parseSet reads set.lua's reply.
func parseSet(key string, token int64, reply any) error {
	items, isArray := reply.([]any)
	if !isArray || len(items) == 0 {
		return unexpected(reply)
	}
	switch code, _ := items[0].(int64); code {
	case 1:
		return nil
	case 0:
		return stale("Set", key, token, items)
	}
	return unexpected(reply)
}

// Update is a fenced read-modify-write: it reads key with Get, passes the
// value (ok false when absent) to fn, and writes what fn returns with Set,
// all with token. Both steps are fenced, so no update is lost: if a holder
// with a higher token reads or writes in between, the write is refused with
// ErrStaleToken. It returns the value written. When fn returns an error,
// nothing is written and Update returns that error. Its other errors are
// Get's.
func (s *Store) Update(ctx context.Context, key string, token int64, fn func(old string, ok bool) (string, error)) (string, error) {
	if fn == nil {
		return "", fmt.Errorf("fence: Update: %w: nil function", dlock.ErrInvalidArgument)
	}
	old, ok, err := s.Get(ctx, key, token)
	if err != nil {
		return "", err
	}
	v, err := fn(old, ok)
	if err != nil {
		return "", err
	}
	if err := s.Set(ctx, key, v, token); err != nil {
		return "", err
	}
	return v, nil
}

func (s *Store) keys(op, key string, token int64) ([]string, error) {
	switch {
	case token == 0:
		// Two holders passing 0 would both be let through.
		return nil, fmt.Errorf("fence: %s %q: %w: token 0 is no fencing token (a Redlock lease has none, and cannot be fenced); "+
			"pass the Token of a lease from a lock that issues them", op, key, dlock.ErrInvalidArgument)
	case token < 0:
		return nil, fmt.Errorf("fence: %s %q: %w: negative token %d", op, key, dlock.ErrInvalidArgument, token)
	}
	mark, err := markKey(key)
	if err != nil {
		return nil, fmt.Errorf("fence: %s %q: %w", op, key, err)
	}
	return []string{key, mark}, nil
}

func stale(op, key string, token int64, items []any) error {
	e := &StaleTokenError{Op: op, Key: key, Token: token}
	if len(items) > 1 {
		if s, ok := items[1].(string); ok {
			e.Highest, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return e
}

func redisError(op, key string, err error) error {
	msg := err.Error()
	if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "FENCE_CONFLICT") {
		// Without the server's script location ("script: <sha>, on
		// @user_script:23.").
		if i := strings.Index(msg, " script: "); i >= 0 {
			msg = msg[:i]
		}
		return fmt.Errorf("fence: %s %q: %w: %s (the Store did not write this key and leaves it untouched)", op, key, dlock.ErrKeyConflict, msg)
	}
	return fmt.Errorf("fence: %s %q: %w", op, key, err)
}

func unexpected(reply any) error {
	return fmt.Errorf("fence: unexpected reply from a script: %#v", reply)
}
