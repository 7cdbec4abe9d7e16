// Package mqttclient is the MQTT 5 test client (paho.golang) shared by the
// hub's tests: the mqtt adapter's own tests and every test that runs the
// whole hub (test/kit/hubtest). It imports nothing of the hub, so the
// adapter's in-package tests can use it.
package mqttclient

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// wait bounds every request to the broker and every wait for a message.
const wait = 5 * time.Second

// queue is how many received messages a client holds for the test.
const queue = 512

// Client is a paho MQTT 5 client with every received message on Msgs.
type Client struct {
	tb   testing.TB
	C    *paho.Client
	Conn net.Conn
	// Msgs holds what the client received; a full queue fails the test
	// (a message owed and dropped is a finding).
	Msgs chan *paho.Publish
}

// Dial connects with cp (a fresh anonymous clean start when nil; keep-alive
// 30 s unless set). The client disconnects when the test ends.
func Dial(tb testing.TB, addr string, cp *paho.Connect) (*Client, *paho.Connack, error) {
	tb.Helper()
	return DialFrom(tb, "", addr, cp)
}

// DialFrom is Dial from the local address from (a loopback address such as
// 127.0.0.2 is another source to the hub; "" lets the system choose).
func DialFrom(tb testing.TB, from, addr string, cp *paho.Connect) (*Client, *paho.Connack, error) {
	tb.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	return Connect(tb, conn, cp)
}

// Connect connects with cp over conn, a connection the test made (a pipe,
// a connection served through the broker's ServeConn); on an error conn is
// closed.
func Connect(tb testing.TB, conn net.Conn, cp *paho.Connect) (*Client, *paho.Connack, error) {
	tb.Helper()
	c := &Client{tb: tb, Conn: conn, Msgs: make(chan *paho.Publish, queue)}
	c.C = paho.NewClient(paho.ClientConfig{
		// paho writes a packet as several buffers, from the test's
		// goroutine and its own (pinger, acknowledgements): on a pipe or a
		// TLS connection another packet could land inside one unless it
		// holds the lock paho takes on a connection offering one.
		Conn: packets.NewThreadSafeConn(conn),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			select {
			case c.Msgs <- pr.Packet:
			default:
				tb.Errorf("test client queue full; dropped %s", pr.Packet.Topic)
			}
			return true, nil
		}},
	})
	if cp == nil {
		cp = &paho.Connect{CleanStart: true}
	}
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ack, err := c.C.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, ack, err
	}
	tb.Cleanup(c.Close)
	return c, ack, nil
}

// MustDial is Dial that fails the test when the connection is refused.
func MustDial(tb testing.TB, addr string, cp *paho.Connect) *Client {
	tb.Helper()
	c, _, err := Dial(tb, addr, cp)
	if err != nil {
		tb.Fatalf("mqtt connect: %v", err)
	}
	return c
}

// WithCreds is a clean start as username with password.
func WithCreds(username, password string) *paho.Connect {
	return &paho.Connect{CleanStart: true, Username: username, UsernameFlag: true, Password: []byte(password), PasswordFlag: true}
}

// Close disconnects; calling it twice is fine.
func (c *Client) Close() {
	_ = c.C.Disconnect(&paho.Disconnect{})
	c.Conn.Close()
}

// Sub subscribes to filter at QoS 1.
func (c *Client) Sub(filter string) (*paho.Suback, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return c.C.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
}

// MustSub is Sub that fails the test on an error.
func (c *Client) MustSub(filter string) {
	c.tb.Helper()
	if _, err := c.Sub(filter); err != nil {
		c.tb.Fatalf("subscribe %s: %v", filter, err)
	}
}

// Pub publishes payload on topic (contentType "": none).
func (c *Client) Pub(topic string, payload []byte, qos byte, retain bool, contentType string) (*paho.PublishResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p := &paho.Publish{Topic: topic, Payload: payload, QoS: qos, Retain: retain}
	if contentType != "" {
		p.Properties = &paho.PublishProperties{ContentType: contentType}
	}
	return c.C.Publish(ctx, p)
}

// MustPub is Pub that fails the test on an error.
func (c *Client) MustPub(topic string, payload []byte, qos byte, retain bool) {
	c.tb.Helper()
	if _, err := c.Pub(topic, payload, qos, retain, ""); err != nil {
		c.tb.Fatalf("publish %s: %v", topic, err)
	}
}

// Next returns the next message on topic, skipping others, or fails the
// test after 5 s.
func (c *Client) Next(topic string) *paho.Publish {
	c.tb.Helper()
	timeout := time.After(wait)
	for {
		select {
		case m := <-c.Msgs:
			if m.Topic == topic {
				return m
			}
		case <-timeout:
			c.tb.Fatalf("no message on %s within %v", topic, wait)
			return nil
		}
	}
}

// None checks that no message arrives on topic within d.
func (c *Client) None(topic string, d time.Duration) {
	c.tb.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-c.Msgs:
			if m.Topic == topic {
				c.tb.Fatalf("unexpected message on %s: %q", topic, m.Payload)
			}
		case <-timeout:
			return
		}
	}
}

// Join publishes td (retained, QoS 1) to lmos/v1/things/{tid}/td and
// returns the payload of the join result on …/td/result.
func (c *Client) Join(tid string, td []byte, contentType string) []byte {
	c.tb.Helper()
	result := lmos.ThingsPrefix + tid + "/td/result"
	// A SUBSCRIBE to a td/result topic is refused (0x87) while the hub is
	// still delivering an earlier result on it, which the test may already
	// have received: retry.
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := c.Sub(result)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("subscribe %s: %v", result, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.Pub(lmos.ThingsPrefix+tid+"/td", td, 1, true, contentType); err != nil {
		c.tb.Fatalf("publish td: %v", err)
	}
	return c.Next(result).Payload
}

// Creds are the credentials an accepted join issues.
type Creds struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// MustJoin is Join that fails the test unless the join is accepted with
// credentials, which it returns.
func (c *Client) MustJoin(tid string, td []byte) Creds {
	c.tb.Helper()
	p := c.Join(tid, td, "")
	var res struct {
		Status      string `json:"status"`
		Credentials *Creds `json:"credentials"`
	}
	if err := json.Unmarshal(p, &res); err != nil || res.Status != "accepted" || res.Credentials == nil {
		c.tb.Fatalf("join result %s (%v)", p, err)
	}
	return *res.Credentials
}
