package mqtt

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestCloseWhileClientsReconnect: clients that keep connecting while the
// broker closes must not hold Close up: every accepted connection ends.
func TestCloseWhileClientsReconnect(t *testing.T) {
	for round := range 5 {
		e := newEnv(t, nil)
		addr := e.addr
		var stop atomic.Bool
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []net.Conn
		for w := range 8 {
			wg.Go(func() {
				for i := 0; i < 2000 && !stop.Load(); i++ {
					conn, err := net.DialTimeout("tcp", addr, time.Second)
					if err != nil {
						continue // closed: keep trying until told to stop
					}
					c := paho.NewClient(paho.ClientConfig{Conn: conn})
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err = c.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("re-%d-%d", w, i%3), CleanStart: true, KeepAlive: 30})
					cancel()
					if err != nil {
						conn.Close()
						continue
					}
					// Hold half the connections open across Close.
					if i%2 == 0 {
						_ = c.Disconnect(&paho.Disconnect{})
						conn.Close()
						continue
					}
					mu.Lock()
					held = append(held, conn)
					mu.Unlock()
				}
			})
		}
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		err := e.b.Close(ctx)
		cancel()
		stop.Store(true)
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
		if err != nil {
			t.Fatalf("round %d: Close after %s: %v", round, time.Since(start).Round(time.Millisecond), err)
		}
		e.stop()
	}
}

// Closing the broker tells MQTT 5 clients why: DISCONNECT 0x8B (Server
// shutting down).
func TestCloseSendsDisconnect(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan byte, 1)
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnServerDisconnect: func(d *paho.Disconnect) { got <- d.ReasonCode }})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	e.stop()
	select {
	case code := <-got:
		if code != 0x8b {
			t.Fatalf("DISCONNECT reason %#x, want 0x8b", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no DISCONNECT")
	}
}
