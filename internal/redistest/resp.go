package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ctlTimeout bounds each control command the harness itself sends.
const ctlTimeout = 5 * time.Second

// ctlConn is a minimal, synchronous RESP2 connection for the harness's own
// control traffic (readiness checks, INFO, CLUSTER, SENTINEL). Unlike a
// go-redis client it starts no goroutines and never dials in the background,
// so polling a paused or dying server cannot leave anything behind.
type ctlConn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// replyError is an error reply ("-ERR ...") from the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// dialCtl connects to addr and authenticates when password is not empty.
func dialCtl(addr, password string, timeout time.Duration) (*ctlConn, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &ctlConn{conn: conn, r: bufio.NewReader(conn), timeout: timeout}
	if password != "" {
		if _, err := c.do("AUTH", password); err != nil {
			conn.Close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return c, nil
}

// ctl runs one command on a fresh connection to addr.
func ctl(addr, password string, args ...string) (any, error) {
	c, err := dialCtl(addr, password, ctlTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(args...)
}

// ctlString runs one command whose reply is a string (status or bulk).
func ctlString(addr, password string, args ...string) (string, error) {
	v, err := ctl(addr, password, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%v: unexpected reply %#v", args, v)
	}
	return s, nil
}

func (c *ctlConn) close() { c.conn.Close() }

// do sends one command and reads its reply: string for status and bulk
// replies, int64, nil, []any, or a replyError as the error.
func (c *ctlConn) do(args ...string) (any, error) {
	if err := c.send(args...); err != nil {
		return nil, err
	}
	v, err := c.read()
	if err != nil {
		return nil, err
	}
	if e, ok := v.(replyError); ok {
		return nil, e
	}
	return v, nil
}

// send writes one command without reading a reply, for the few commands
// that send none.
func (c *ctlConn) send(args ...string) error {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	_, err := c.conn.Write(buf)
	return err
}

func (c *ctlConn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return replyError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, errors.New("unsupported reply type " + strconv.Quote(string(kind)))
}

// infoField returns one "name:value" field of an INFO reply.
func infoField(info, name string) string {
	for _, line := range splitLines(info) {
		if len(line) > len(name) && line[len(name)] == ':' && line[:len(name)] == name {
			return line[len(name)+1:]
		}
	}
	return ""
}

// splitLines splits a CRLF- or LF-separated reply into non-empty lines.
func splitLines(s string) []string {
	var lines []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '\n' {
			line := s[start:i]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if line != "" {
				lines = append(lines, line)
			}
			start = i + 1
		}
	}
	return lines
}

// pairs turns a flat [k1, v1, k2, v2, ...] reply (as SENTINEL MASTER gives)
// into a map of its string values.
func pairs(v any) map[string]string {
	arr, _ := v.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m
}
