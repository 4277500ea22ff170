package dlock

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/glob"
)

// List returns the state of every primitive whose name matches pattern, a
// Redis glob (empty means every name), under the Client's key prefix: one
// LockInfo per name and kind, as Inspect returns them, sorted by name. It
// finds names with SCAN (on every master of a Cluster), so it does not block
// the server and, like SCAN, may miss a name created while it runs.
//
// A name whose keys hold something dlock did not write is left out, and its
// error, matching ErrKeyConflict, is joined into the returned error, which
// comes with the other names' LockInfos. Otherwise List returns ErrClosed, an
// error matching errors.ErrUnsupported when the Client's driver cannot list
// keys (driver.Scanner), or the failure to reach Redis. It is safe for
// concurrent use.
func (c *Client) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if err := c.checkOpen("List", pattern); err != nil {
		return nil, err
	}
	scanner, ok := c.drv.(driver.Scanner)
	if !ok {
		return nil, errs.Errorf("dlock: List: %w: the driver %T cannot list keys (it does not implement driver.Scanner)",
			errors.ErrUnsupported, c.drv)
	}
	if pattern == "" {
		pattern = "*"
	}
	prefix := c.cfg.keyPrefix
	suffixes := c.keySuffixes()
	found := map[string]bool{}
	// The glob also matches names the pattern does not (its last "*" runs
	// into names containing '}'), so each name is matched again.
	match := glob.Escape(prefix) + "{" + pattern + "}*"
	err := scanner.Scan(ctx, match, func(key string) bool {
		if name, ok := nameOfKey(key, prefix, suffixes); ok && glob.Match(pattern, name) {
			found[name] = true
		}
		return true
	})
	if err != nil {
		return nil, errs.Errorf("dlock: List %q: %w", pattern, err)
	}
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)

	var infos []LockInfo
	var conflicts []error
	const batch = 100 // names per pipelined round trip
	for len(names) > 0 {
		n := min(batch, len(names))
		calls := make([]*driver.Call, n)
		for i, name := range names[:n] {
			calls[i] = c.inspectCall(name)
		}
		c.drv.Run(ctx, calls...)
		for i, name := range names[:n] {
			st, err := parseInspect(name, calls[i])
			if err != nil {
				err = errs.Redis("List", name, err)
				if !errors.Is(err, ErrKeyConflict) {
					return nil, err
				}
				conflicts = append(conflicts, err)
				continue
			}
			infos = append(infos, st.infos...) // none if the name's keys expired meanwhile
		}
		names = names[n:]
	}
	return infos, errs.Join(conflicts...)
}

// keySuffixes returns what follows "<prefix>{<name>}" in the keys of every
// kind of primitive: "", ":fence", ":re", ":rw:q", ...
func (c *Client) keySuffixes() map[string]bool {
	const name = "n"
	base := c.cfg.keyPrefix + "{" + name + "}"
	suffixes := map[string]bool{}
	for _, k := range c.inspectKeys(name) {
		suffixes[strings.TrimPrefix(k, base)] = true
	}
	return suffixes
}

// nameOfKey returns the name whose key key is, if key is one of dlock's
// under prefix. A name may contain braces, but no suffix does, so the name
// ends at the key's last '}'.
func nameOfKey(key, prefix string, suffixes map[string]bool) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.LastIndexByte(rest, '}')
	if end < 0 || !suffixes[rest[end+1:]] {
		return "", false
	}
	name := rest[:end]
	if checkName(name) != nil {
		return "", false
	}
	return name, true
}
