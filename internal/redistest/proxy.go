package redistest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free loopback port that forwards to one target
// (usually a Server's Addr) and injects network faults: latency, a
// blackhole, held replies and connection resets. Point a client at Addr
// instead of the server. Its methods are safe for concurrent use and take
// effect at once on every connection. It is closed by the cleanup of the test
// that started it; Close waits for all its goroutines.
type Proxy struct {
	target string
	ln     net.Listener

	latency   atomic.Int64 // time.Duration
	blackhole atomic.Bool
	hold      atomic.Bool

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}
	wg     sync.WaitGroup // every goroutine of the proxy
}

// StartProxy starts a proxy to target and registers tb's cleanup to Close it.
// Each accepted connection dials target anew; if that fails, the client's
// connection is closed.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes by d in each direction, so a
// request-reply round trip takes at least 2*d more. Chunks already in
// flight keep their delay. Zero turns it off.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole, when on, keeps every connection open but silently drops all
// bytes in both directions, as a network partition looks to a client that
// waits for a reply. Connections accepted while it is on never reach the
// target, even after it is turned off. Bytes dropped are gone: a connection
// that lost some is out of step with the server, and clients discard it
// after their read timeout.
func (p *Proxy) Blackhole(on bool) {
	p.blackhole.Store(on)
	p.wakeAll()
}

// HoldReplies, when on, lets client-to-server bytes through but buffers all
// server-to-client bytes until it is turned off, when they are delivered in
// order: the server executes a command but the client cannot know.
func (p *Proxy) HoldReplies(on bool) {
	p.hold.Store(on)
	p.wakeAll()
}

// HoldOpenReplies is HoldReplies for the connections open now only:
// connections accepted later pass replies as usual, so a client that dials
// meanwhile (go-redis waits for its handshake's reply) is not held up.
// Turning it off delivers what it held, in order.
func (p *Proxy) HoldOpenReplies(on bool) {
	for _, l := range p.snapshot() {
		l.held.Store(on)
	}
	p.wakeAll()
}

// ResetAll closes every current connection on both sides with a TCP RST
// (SO_LINGER 0), as a crashed middlebox would. New connections are accepted
// as usual.
func (p *Proxy) ResetAll() {
	for _, l := range p.snapshot() {
		l.close(true)
	}
}

// Close stops accepting, closes every connection and waits until all the
// proxy's goroutines have returned. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	for _, l := range p.snapshot() {
		l.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// wakeAll makes every writer look at the proxy's flags again. Broadcasting
// under each link's lock, after the flag is stored, means no writer can miss
// the change between checking the flag and waiting.
func (p *Proxy) wakeAll() {
	for _, l := range p.snapshot() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: try again shortly.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		l := &link{p: p, client: conn, done: make(chan struct{})}
		l.cond = sync.NewCond(&l.mu)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			conn.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run(p.blackhole.Load())
	}
}

// link is one proxied connection: the client's and the one to the target.
type link struct {
	p      *Proxy
	client net.Conn

	held atomic.Bool // HoldOpenReplies

	mu       sync.Mutex
	cond     *sync.Cond // signalled on new chunks, eof, close and flag changes
	server   net.Conn   // nil until dialled, and forever for a dead end
	closed   bool
	done     chan struct{} // closed with closed
	up, down flow          // client to server, server to client
}

// flow is the queue of one direction.
type flow struct {
	queue []chunk
	eof   bool // the reader has seen EOF or an error
}

type chunk struct {
	data []byte
	due  time.Time // when the latency in force at read time has passed
}

// run dials the target and pumps both directions, or, for a connection
// accepted during a blackhole, just swallows what the client sends.
func (l *link) run(deadEnd bool) {
	defer l.p.wg.Done()
	if deadEnd {
		l.pump(l.client, nil)
		l.close(false)
		return
	}
	server, err := net.DialTimeout("tcp", l.p.target, 2*time.Second)
	if err != nil {
		l.close(false)
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		server.Close()
		return
	}
	l.server = server
	l.mu.Unlock()

	l.p.wg.Add(3)
	go func() { defer l.p.wg.Done(); l.pump(server, &l.down) }()
	go func() { defer l.p.wg.Done(); l.deliver(server, &l.up, false) }()
	go func() { defer l.p.wg.Done(); l.deliver(l.client, &l.down, true) }()
	l.pump(l.client, &l.up)
}

// pump reads src into f's queue, stamping each chunk with its due time, or
// drops it during a blackhole (or always, when f is nil).
func (l *link) pump(src net.Conn, f *flow) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && f != nil && !l.p.blackhole.Load() {
			c := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(l.p.latency.Load()))}
			l.mu.Lock()
			f.queue = append(f.queue, c)
			l.cond.Broadcast()
			l.mu.Unlock()
		}
		if err != nil {
			if f != nil {
				l.mu.Lock()
				f.eof = true
				l.cond.Broadcast()
				l.mu.Unlock()
			}
			return
		}
	}
}

// deliver writes f's chunks to dst once they are due, unless held (replies
// only) or blackholed. When the source has ended and the queue is empty it
// closes the link.
func (l *link) deliver(dst net.Conn, f *flow, replies bool) {
	for {
		l.mu.Lock()
		for !l.closed && !(f.eof && len(f.queue) == 0) &&
			(len(f.queue) == 0 || (replies && (l.p.hold.Load() || l.held.Load()))) {
			l.cond.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return
		}
		if len(f.queue) == 0 { // eof and everything delivered
			l.mu.Unlock()
			l.close(false)
			return
		}
		c := f.queue[0]
		f.queue[0] = chunk{}
		f.queue = f.queue[1:]
		l.mu.Unlock()

		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		if l.p.blackhole.Load() {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close(false)
			return
		}
	}
}

// close closes both connections, with RST if reset, wakes the link's
// goroutines and forgets the link. It is idempotent.
func (l *link) close(reset bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.done)
	l.cond.Broadcast()
	conns := []net.Conn{l.client, l.server}
	l.mu.Unlock()
	for _, c := range conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
	l.p.mu.Lock()
	delete(l.p.links, l)
	l.p.mu.Unlock()
}
