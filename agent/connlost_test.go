package agent

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// relay forwards TCP connections to a hub's broker. Once mute is set,
// what the agents send is read and dropped (counted in dropped): the hub
// never sees it and never acknowledges it, as when the network fails.
type relay struct {
	addr    string
	mute    atomic.Bool
	dropped atomic.Int64
}

func startRelay(t *testing.T, to string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &relay{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, up); c.Close() }()
			go func() {
				defer up.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if r.mute.Load() {
						r.dropped.Add(int64(n))
					} else if _, werr := up.Write(buf[:n]); werr != nil {
						return
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return r
}

// A request waiting for the hub's acknowledgement ends when the
// connection does, with ErrNotConnected, not when its Timeout runs out:
// paho forgets it on the disconnection. The same wait in the agent's
// SUBSCRIBE after a reconnect held its next attempt back for the Timeout
// (TestMDNSPinnedAgentSkipsFakeHubs waited for it in vain).
func TestRequestEndsWithConnection(t *testing.T) {
	h := startHub(t)
	r := startRelay(t, h.addr)
	const id = "urn:test:conn-lost"
	a := h.connect(id, func(o *Options) { o.URL, o.Timeout = "mqtt://"+r.addr, time.Hour })
	r.mute.Store(true)
	done := make(chan error, 1)
	go func() { done <- a.Emit("alarm", 1) }()
	waitFor(t, 10*time.Second, "the event's PUBLISH dropped by the relay", func() bool { return r.dropped.Load() > 0 })
	r.mute.Store(false) // for the reconnection
	dropConnection(a)
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotConnected) {
			t.Fatalf("emit: %v, want ErrNotConnected", err)
		}
	case <-time.After(30 * time.Second): // the Timeout is an hour
		t.Fatal("the emit still waits for its acknowledgement after the connection ended")
	}
	// The agent is back and publishes again.
	waitFor(t, 20*time.Second, "an emit on the new connection", func() bool { return a.Emit("alarm", 2) == nil })
}
