package mqtt

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// An idle client used to park a read buffer for as long as it stayed
// connected: mochi reads through a bufio.Reader it allocates per client
// (Options.ClientNetReadBufferSize). mochi's reader is now bufio's least
// (16 bytes), and outConn.Read buffers instead, in a chunk taken from a
// pool only once the socket has bytes to read: it waits for readability
// through the socket's RawConn with no buffer held, reads what is there
// into a chunk, serves mochi from it and hands the chunk back when mochi
// has taken everything. A burst of small packets still costs one read
// system call per chunk, as it did per 1 KiB buffer before.
//
// Connections without a file descriptor (MQTT over WebSocket, TLS) cannot
// be waited on without reading; they keep a 1 KiB buffer of their own, as
// mochi's reader was before, so a small packet costs them no more reads.

// connBufSize is the buffer of a connection without a descriptor.
const connBufSize = 1 << 10

// readChunkSize is the chunk a readable socket is read into. A read as large
// as a chunk (a packet body mochi reads whole) goes straight into the
// caller's buffer.
const readChunkSize = 4 << 10

var readChunks = sync.Pool{New: func() any { b := make([]byte, readChunkSize); return &b }}

// leanReader is outConn's read side. Only mochi's reading goroutine uses
// it.
type leanReader struct {
	raw syscall.RawConn // nil: read the connection directly
	// chunk is held only while it has unread bytes (atomic, so that a
	// test may look at it from another goroutine).
	chunk atomic.Pointer[[]byte]
	r, w  int // unread bytes are chunk[r:w]
	// fill is the RawConn callback (made once, so that a read allocates
	// nothing); it reads into dst, or into a fresh chunk when dst is nil.
	fill func(fd uintptr) bool
	dst  []byte
	n    int
	err  error
	// buf is the buffer of a connection without a descriptor (raw nil),
	// allocated on its first read; its unread bytes are buf[r:w].
	buf []byte
	// one is ReadByte's destination (a local would escape through dst).
	one [1]byte
}

// initLeanReader sets up buffered reading for c's socket, if it has one.
func (c *outConn) initLeanReader() {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	lr := &c.lr
	lr.raw = raw
	lr.fill = func(fd uintptr) bool {
		into, pooled := lr.dst, (*[]byte)(nil)
		if into == nil {
			pooled = readChunks.Get().(*[]byte)
			into = *pooled
		}
		var n int
		var err error
		for {
			n, err = syscall.Read(int(fd), into)
			if err != syscall.EINTR {
				break
			}
		}
		if err == syscall.EAGAIN {
			if pooled != nil {
				readChunks.Put(pooled) // nothing to read: hold no buffer while waiting
			}
			return false
		}
		switch {
		case err != nil:
			lr.n, lr.err = 0, os.NewSyscallError("read", err)
		case n == 0:
			lr.n, lr.err = 0, io.EOF
		default:
			lr.n, lr.err = n, nil
		}
		if pooled != nil {
			if n > 0 {
				lr.r, lr.w = 0, n
				lr.chunk.Store(pooled)
			} else {
				readChunks.Put(pooled)
			}
		}
		return true
	}
}

// Read is mochi's read of the connection.
func (c *outConn) Read(p []byte) (int, error) {
	lr := &c.lr
	if lr.raw == nil {
		if lr.r == lr.w {
			c.flushBeforeRead()
		}
		return lr.readConn(c.Conn, p)
	}
	chunk := lr.chunk.Load()
	if chunk == nil {
		if len(p) == 0 {
			return 0, nil
		}
		c.flushBeforeRead()
		if len(p) >= readChunkSize {
			lr.dst = p
		}
		err := lr.raw.Read(lr.fill)
		lr.dst = nil
		if err != nil {
			return 0, err // closed, or the read deadline passed
		}
		if chunk = lr.chunk.Load(); chunk == nil { // read into p, or an error
			return lr.n, c.readErr()
		}
	}
	n := copy(p, (*chunk)[lr.r:lr.w])
	lr.r += n
	if lr.r == lr.w {
		lr.chunk.Store(nil)
		readChunks.Put(chunk)
	}
	return n, nil
}

// readErr is the error of the last fill, as net's own read reports it (for
// the logs).
func (c *outConn) readErr() error {
	if err := c.lr.err; err != nil && err != io.EOF {
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return c.lr.err
}

// ReadByte reads one byte: the hub's connection loop decodes fixed
// headers with it (connloop.go).
func (c *outConn) ReadByte() (byte, error) {
	n, err := c.Read(c.lr.one[:])
	if n == 1 {
		return c.lr.one[0], nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return 0, err
}

// awaitRead waits until the socket has bytes to read, holding no buffer
// while it waits, and reads them into a chunk: the hub's connection loop
// waits here, in a shallow frame, between packets (connloop.go). The writes
// held for the next read go out first (ackbatch.go). A connection without
// a descriptor waits in its next Read instead.
func (c *outConn) awaitRead() error {
	lr := &c.lr
	if lr.raw == nil || lr.chunk.Load() != nil {
		return nil
	}
	c.flushBeforeRead()
	if err := lr.raw.Read(lr.fill); err != nil {
		return err // closed, or the read deadline passed
	}
	if lr.chunk.Load() == nil {
		if err := c.readErr(); err != nil {
			return err
		}
	}
	return nil
}

// idle reports that no chunk is held.
func (lr *leanReader) idle() bool { return lr.chunk.Load() == nil }

// readConn serves reads of a connection without a descriptor from buf.
// A connection's read error repeats, so one that comes with bytes is left
// for the next read.
func (lr *leanReader) readConn(conn net.Conn, p []byte) (int, error) {
	if lr.r == lr.w {
		if len(p) >= connBufSize {
			return conn.Read(p)
		}
		if lr.buf == nil {
			lr.buf = make([]byte, connBufSize)
		}
		n, err := conn.Read(lr.buf)
		if n == 0 {
			return 0, err
		}
		lr.r, lr.w = 0, n
	}
	n := copy(p, lr.buf[lr.r:lr.w])
	lr.r += n
	return n, nil
}
