package agent

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A pinned agent given a plain URL refuses it before dialling: its
// credentials would cross the LAN in clear (issue 24 point 5).
func TestPinnedAgentRefusesPlainURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	const fp = "sha256:" + "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89"
	creds := &Credentials{Username: "urn:example:pinned", Password: "secret"}
	for _, u := range []string{"mqtt://", "tcp://", "ws://"} {
		for _, o := range []Options{{TLSFingerprint: fp}, {TLSPinFile: t.TempDir() + "/hub.pin"}} {
			o.URL = u + ln.Addr().String()
			if u == "ws://" {
				o.URL += "/ws"
			}
			o.TD, o.Credentials, o.Timeout = []byte(`{"id":"urn:example:pinned","title":"P"}`), creds, time.Second
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := Connect(ctx, o)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "only over TLS") {
				t.Errorf("%s pinned: %v, want a refusal to connect in clear", o.URL, err)
			}
		}
	}
	// A marker connection: accepted first unless the agent dialled before.
	marker, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	for c := range accepted {
		if c.RemoteAddr().String() == marker.LocalAddr().String() {
			break
		}
		t.Errorf("the pinned agent connected to the plain listener from %s", c.RemoteAddr())
	}
}
