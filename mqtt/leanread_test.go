package mqtt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Packets written back to back in one write, straddling the read chunks,
// one of them larger than three chunks, all reach mosquitto_sub whole and
// in order: outConn.Read hands mochi every byte of a chunk before the next
// read, and reads a body of a chunk or more straight into mochi's buffer.
// The same over a connection without a descriptor (ServeConn, as MQTT
// over WebSocket), which is read through its own buffer.
func TestReadChunksCarryEveryPacket(t *testing.T) {
	for _, transport := range []string{"tcp", "pipe"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, nil)
			id := "urn:chunks-" + transport
			topic := lmos.ThingsPrefix + id + "/events/n"
			_, creds := joinOwner(t, e, id, nil)
			const n = 300
			wait := mosquittoSub(t, e, "chunks-sub", topic, "-V", "mqttv5", "-C", fmt.Sprint(n))
			want := make([]string, n)
			var burst []byte
			for i := range want {
				size := (i * 37) % 200
				if i == n/2 {
					size = 3*readChunkSize + 5
				}
				want[i] = fmt.Sprintf("m-%d-%s", i, strings.Repeat("x", size))
				body := append([]byte{0, byte(len(topic))}, topic...)
				body = append(body, 0) // no properties
				body = append(body, want[i]...)
				burst = append(appendVarInt(append(burst, 0x30), len(body)), body...)
			}
			var conn net.Conn
			if transport == "tcp" {
				conn = rawConnect5As(t, e.addr, "chunks-pub", true, creds)
			} else {
				var server net.Conn
				server, conn = net.Pipe()
				t.Cleanup(func() { conn.Close() })
				go e.b.ServeConn(server)
				discard(conn)
				burst = append(connect5("chunks-pub", creds), burst...)
			}
			if _, err := conn.Write(burst); err != nil {
				t.Fatal(err)
			}
			got := wait()
			if len(got) != n {
				t.Fatalf("mosquitto_sub got %d of %d messages", len(got), n)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("message %d: got %.40q (%d bytes), want %.40q (%d bytes)", i, got[i], len(got[i]), want[i], len(want[i]))
				}
			}
		})
	}
}

// connect5 is an MQTT 5 CONNECT of id with a Thing's credentials, clean
// start, keep-alive 60 s.
func connect5(id string, cred *credentials) []byte {
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0xc2, 0, 60, 0, 0, byte(len(id))}
	vh = append(vh, id...)
	vh = append(vh, 0, byte(len(cred.Username)))
	vh = append(vh, cred.Username...)
	vh = append(vh, 0, byte(len(cred.Password)))
	vh = append(vh, cred.Password...)
	return append(appendVarInt([]byte{0x10}, len(vh)), vh...)
}

// An idle client holds no read buffer of the hub's: its connection is
// read through the socket (not directly), and once its CONNECT and
// SUBSCRIBE are read no chunk stays with it.
func TestIdleClientHoldsNoReadChunk(t *testing.T) {
	e := newEnv(t, nil)
	const clients = 20
	for i := range clients {
		if _, err := idleClient(e.addr, fmt.Sprintf("idle-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range clients {
		cl, ok := e.b.server.Clients.Get(fmt.Sprintf("idle-%d", i))
		if !ok {
			t.Fatalf("idle-%d not connected", i)
		}
		oc, ok := cl.Net.Conn.(*outConn)
		if !ok || oc.lr.raw == nil {
			t.Fatalf("idle-%d is not read through its socket", i)
		}
		// mochi's reader may still be between the SUBSCRIBE and its next
		// read; once it waits again it holds nothing.
		testwait.Eventually(t, 2*time.Second, "no chunk held", oc.lr.idle)
	}
}

// The keep-alive still ends a silent client: mochi's read deadline holds
// while the hub waits on the socket without a buffer.
func TestKeepAliveEndsSilentClient(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// MQTT 3.1.1 CONNECT, clean session, keep-alive 1 s, client id "quiet".
	if _, err := conn.Write([]byte{0x10, 17, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 1, 0, 5, 'q', 'u', 'i', 'e', 't'}); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	ack := make([]byte, 4)
	if _, err := io.ReadFull(r, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("connack %x %v", ack, err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		// A deadline that did not hold leaves the connection open until
		// ours (an i/o timeout here).
		t.Fatalf("connection not closed by the keep-alive: %v", err)
	}
}
