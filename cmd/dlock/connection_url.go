package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// resolve turns the settings into a target without sending anything. It
// returns nil, nil when no server is configured.
func (o *connOptions) resolve() (*target, error) {
	raw, source := o.url, "--redis"
	if raw == "" {
		raw, source = o.getenv(redisURLEnv), "$"+redisURLEnv
	}
	if raw == "" {
		return nil, nil
	}
	if bareHostPort(raw) {
		return nil, usageErrorf("%s %q is an address, not a URL: write redis://%s (rediss:// for TLS)", source, raw, raw)
	}
	// url.Parse rejects a list of hosts: parse the URL without it.
	var hostList string
	if scheme, _, ok := strings.Cut(raw, "://"); ok && (strings.HasSuffix(scheme, "+sentinel") || strings.HasSuffix(scheme, "+cluster")) {
		raw, hostList = cutHostList(raw)
	}
	u, err := url.Parse(raw)
	if hostList != "" && err == nil {
		u.Host = hostList
	}
	if err != nil {
		// url's message quotes the whole URL, which may hold a password.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, usageErrorf("%s is not a valid URL: %v", source, err)
	}
	desc := fmt.Sprintf("%s (from %s)", u.Redacted(), source)
	switch u.Scheme {
	case "redis", "rediss", "unix":
	case "redis+sentinel", "rediss+sentinel":
		return o.resolveSentinel(u, source, desc)
	case "redis+cluster", "rediss+cluster":
		return o.resolveCluster(u, source, desc)
	default:
		return nil, usageErrorf("%s: unsupported scheme %q in %s: use redis://host:port (rediss:// for TLS), "+
			"redis+sentinel://host:port,.../master or redis+cluster://host:port,... (see dlock --help)",
			source, u.Scheme, u.Redacted())
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	// The URL's own password wins: it is the more specific setting.
	if opts.Password == "" {
		opts.Password = o.getenv(redisPasswordEnv)
	}
	return &target{desc: "Redis at " + desc, standalone: opts}, nil
}

// resolveSentinel resolves redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db][?options]:
// the addresses are the Sentinels', the credentials the master's. It hands
// the options to go-redis's own parser, in the form that expects.
func (o *connOptions) resolveSentinel(u *url.URL, source, desc string) (*target, error) {
	hosts, err := splitHosts(u.Host, defaultSentinelPort)
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, usageErrorf("%s: %s: give the name of the master the Sentinels monitor as the path, "+
			"and optionally the database: redis+sentinel://host:26379/mymaster[/db]", source, u.Redacted())
	}
	q := withAddrs(u.Query(), hosts[1:])
	q.Set("master_name", parts[0])
	inner := &url.URL{Scheme: strings.TrimSuffix(u.Scheme, "+sentinel"), Host: hosts[0], RawQuery: q.Encode()}
	if len(parts) == 2 {
		inner.Path = "/" + parts[1]
	}
	opts, err := redis.ParseFailoverURL(inner.String())
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	// ParseFailoverURL reads the URL's credentials as the Sentinels'; ours
	// are the master's, like the other forms' are the server's.
	opts.SentinelUsername, opts.SentinelPassword = "", o.getenv(redisSentinelPasswordEnv)
	if u.User != nil {
		opts.Username = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			opts.Password = pw
		}
	}
	if opts.Password == "" {
		opts.Password = o.getenv(redisPasswordEnv)
	}
	if opts.TLSConfig != nil {
		// Verify each server by the address it is reached at: the master
		// is found through the Sentinels.
		opts.TLSConfig.ServerName = ""
	}
	return &target{desc: "Redis Sentinel master at " + desc, failover: opts}, nil
}

// resolveCluster resolves redis+cluster://[[user]:password@]host:port[,host:port...][?options].
func (o *connOptions) resolveCluster(u *url.URL, source, desc string) (*target, error) {
	hosts, err := splitHosts(u.Host, defaultRedisPort)
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	if strings.Trim(u.Path, "/") != "" {
		return nil, usageErrorf("%s: %s: a Cluster URL has no path (a Cluster has only database 0)", source, u.Redacted())
	}
	q := withAddrs(u.Query(), hosts[1:])
	inner := &url.URL{Scheme: strings.TrimSuffix(u.Scheme, "+cluster"), User: u.User, Host: hosts[0], RawQuery: q.Encode()}
	opts, err := redis.ParseClusterURL(inner.String())
	if err != nil {
		return nil, usageErrorf("%s: %s: %v", source, u.Redacted(), err)
	}
	if opts.Password == "" {
		opts.Password = o.getenv(redisPasswordEnv)
	}
	if opts.TLSConfig != nil {
		opts.TLSConfig.ServerName = "" // verify each node by its own address
	}
	return &target{desc: "Redis Cluster at " + desc, cluster: opts}, nil
}

// bareHostPort reports whether s is "host:port" without a scheme, which
// url.Parse misreads ("first path segment in URL cannot contain colon", or
// "localhost" as a scheme). It is not taken as redis://host:port: the URL
// forms stay the only ones, and a typo in a scheme is not silently an
// address. Without '@', s can hold no password to echo.
func bareHostPort(s string) bool {
	if strings.Contains(s, "://") || strings.Contains(s, "@") {
		return false
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil || port == "" {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// withAddrs puts hosts first among q's addr parameters, which is how
// go-redis's URL parsers take further addresses.
func withAddrs(q url.Values, hosts []string) url.Values {
	q["addr"] = append(append([]string(nil), hosts...), q["addr"]...)
	if len(q["addr"]) == 0 {
		delete(q, "addr")
	}
	return q
}

// cutHostList takes the host list out of a URL's authority
// ("[user:password@]host:port,host:port..."), leaving a placeholder host.
func cutHostList(raw string) (rest, hostList string) {
	start := strings.Index(raw, "://") + len("://")
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	authority := raw[start:end]
	at := strings.LastIndexByte(authority, '@') + 1 // 0 without userinfo
	return raw[:start] + authority[:at] + "hosts" + raw[end:], authority[at:]
}

// splitHosts splits a URL's comma-separated host list, adding defaultPort
// to the addresses without one.
func splitHosts(hostList, defaultPort string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(hostList, ",") {
		if h == "" {
			return nil, errors.New("empty address in the host list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, fmt.Errorf("invalid address %q", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}
