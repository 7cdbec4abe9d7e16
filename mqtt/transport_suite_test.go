package mqtt

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/transporttest"
)

// The broker passes the behaviour suite every hub.Transport passes, with a
// paho agent that joined over MQTT on the other side.
func TestBrokerIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		e := newEnv(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000a1"
		actions := lmos.ThingsPrefix + lmos.TopicKey(id) + "/actions/" + transporttest.ActionCount
		a := transporttest.StartMQTTAgent(t, e.addr, id, func() bool { return e.b.Subscribers(actions) == 0 })
		return transporttest.Env{Transport: e.b, Registry: e.reg, ThingID: id, Agent: a, Idle: transporttest.IdleOf(e.b.Interactions)}
	})
}
