package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admin runs the harness's own commands on one redis-server: FLUSHALL
// between libraries, CONFIG RESETSTAT before a measurement and INFO
// commandstats after it. It uses its own connection, so its commands are
// never counted against a library (and it leaves INFO, CONFIG and FLUSHALL
// out of every count).
type Admin struct {
	rdb *redis.Client
}

// NewAdmin connects to addr with a single connection.
func NewAdmin(addr string) *Admin {
	return &Admin{rdb: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})}
}

// Close closes the connection.
func (a *Admin) Close() error { return a.rdb.Close() }

// Flush deletes every key and the script cache, so each library starts from
// an empty server.
func (a *Admin) Flush(ctx context.Context) error {
	if err := a.rdb.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return a.rdb.ScriptFlush(ctx).Err()
}

// ResetStats zeroes the server's command counters.
func (a *Admin) ResetStats(ctx context.Context) error {
	return a.rdb.ConfigResetStat(ctx).Err()
}

// CommandStats returns the per-command call counts since the last reset.
func (a *Admin) CommandStats(ctx context.Context) (CommandStats, error) {
	s, err := a.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(s)
}

// CPU returns the server process's CPU time so far (used_cpu_user +
// used_cpu_sys from INFO cpu).
func (a *Admin) CPU(ctx context.Context) (time.Duration, error) {
	s, err := a.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// Version returns the server's redis_version.
func (a *Admin) Version(ctx context.Context) (string, error) {
	s, err := a.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no redis_version in INFO server")
}

// CommandStats maps a command name as INFO commandstats spells it ("set",
// "evalsha", "config|resetstat") to its number of calls. Redis counts the
// commands scripts run inside them too.
type CommandStats map[string]int64

// adminCommands are what the harness itself sends; they are never counted.
var adminCommands = map[string]bool{
	"info": true, "config|resetstat": true, "flushall": true, "script|flush": true,
	"hello": true, "client|setinfo": true,
}

// ParseCommandStats parses the reply of INFO commandstats, dropping the
// harness's own commands (INFO, CONFIG RESETSTAT, FLUSHALL, SCRIPT FLUSH and
// the connection handshake).
func ParseCommandStats(info string) (CommandStats, error) {
	cs := CommandStats{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats: malformed line %q", line)
		}
		var calls int64 = -1
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats: %q: %w", line, err)
				}
				calls = n
			}
		}
		if calls < 0 {
			return nil, fmt.Errorf("commandstats: no calls in %q", line)
		}
		if !adminCommands[name] {
			cs[name] = calls
		}
	}
	return cs, nil
}

// Total returns the number of calls of every command.
func (cs CommandStats) Total() int64 {
	var n int64
	for _, v := range cs {
		n += v
	}
	return n
}

// Per divides every count by n, for per-acquisition or per-second figures.
func (cs CommandStats) Per(n float64) map[string]float64 {
	m := make(map[string]float64, len(cs))
	for k, v := range cs {
		if n > 0 {
			m[k] = float64(v) / n
		}
	}
	return m
}

// FormatBreakdown renders per-command figures, largest first, as
// "evalsha 2.00, get 1.00".
func FormatBreakdown(m map[string]float64, digits int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	for _, k := range names {
		if s := strconv.FormatFloat(m[k], 'f', digits, 64); strings.Trim(s, "0.") != "" {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", k, s)
		}
	}
	if b.Len() == 0 {
		return "–"
	}
	return b.String()
}
