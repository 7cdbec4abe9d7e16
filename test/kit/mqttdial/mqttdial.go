// Package mqttdial connects the paho.golang MQTT 5 client the load tools
// use (test/kit/mqttload, the e2e MQTT benchmarks) outside any test: it
// imports neither testing nor anything of the hub.
package mqttdial

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// connectTimeout bounds the TCP connect and the CONNECT/CONNACK exchange.
const connectTimeout = 10 * time.Second

// Dial connects to addr with cp; onMsg (nil: no messages expected) sees
// every message received. A CONNACK with a reason code other than 0 is an
// error.
func Dial(addr string, cp *paho.Connect, onMsg func(*paho.Publish)) (*paho.Client, error) {
	conn, err := net.DialTimeout("tcp", addr, connectTimeout)
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{Conn: conn}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onMsg(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("mqtt connect %s: %w", cp.ClientID, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("mqtt connect %s: reason code %#x", cp.ClientID, ca.ReasonCode)
	}
	return c, nil
}
