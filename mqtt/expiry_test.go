package mqtt

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// A retained message and a message stored for an offline session, each
// with a Message Expiry Interval, are delivered before it and gone once
// it passed [MQTT-3.3.2-5] (mochi's sweeps every second). Gone from memory without anyone
// asking for them (nothing else removes them), and from the store: after
// a restart neither comes back. mosquitto_pub and mosquitto_sub (MQTT 5)
// speak for the agents.
func TestExpiredMessagesGone(t *testing.T) {
	e := newEnv(t, nil)
	const pubID = "urn:exp:pub"
	pub := e.thing(t, pubID)
	retained := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/properties/p"
	event := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/e"
	as := func(c *credentials) []string {
		host, port, _ := net.SplitHostPort(e.addr)
		return []string{"-h", host, "-p", port, "-V", "mqttv5", "-u", c.Username, "-P", c.Password}
	}
	// The watcher's session outlives it and is subscribed to the event.
	watch := e.thing(t, "urn:exp:watch")
	const watchID = "exp-watch"
	w := mustDial(t, e.addr, persistentAs(watch, watchID, 3600))
	w.mustSub(event)
	w.close()
	testwait.Eventually(t, 5*time.Second, "watcher offline", func() bool {
		cl, ok := e.b.server.Clients.Get(watchID)
		return ok && cl.StopTime() != 0
	})

	runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-pub-1", "-t", retained, "-m", "r", "-r", "-q", "1",
		"-D", "publish", "message-expiry-interval", "3")...)
	runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-pub-2", "-t", event, "-m", "e", "-q", "1",
		"-D", "publish", "message-expiry-interval", "2")...)
	if got := runMosquitto(t, 0, "mosquitto_sub", append(as(pub), "-i", "exp-sub-1", "-t", retained, "-C", "1", "-W", "5")...); got != "r\n" {
		t.Fatalf("before its expiry the retained message reads %q", got)
	}
	cl, ok := e.b.server.Clients.Get(watchID)
	if !ok || cl.State.Inflight.Len() != 1 {
		t.Fatalf("the offline session holds %d messages, want the event", cl.State.Inflight.Len())
	}

	testwait.Eventually(t, 10*time.Second, "expired messages removed", func() bool {
		_, kept := e.b.server.Topics.Retained.Get(retained)
		return !kept && cl.State.Inflight.Len() == 0
	})
	e.restart()
	if got := runMosquitto(t, 27, "mosquitto_sub", append(as(pub), "-i", "exp-sub-2", "-t", retained, "-C", "1", "-W", "1")...); got != "" {
		t.Fatalf("an expired retained message was delivered: %q", got)
	}
	if got := runMosquitto(t, 27, "mosquitto_sub", append(as(watch), "-i", watchID, "-c", "-x", "3600", "-t", event,
		"-q", "1", "-C", "1", "-W", "1")...); got != "" {
		t.Fatalf("an expired message was delivered to the resumed session: %q", got)
	}
}

// What Serve restores from the store expires at its deadline: a session (mochi calls OnDisconnect for it), a retained message
// and a message kept for an offline session, which mochi restores without
// their expiry (restoreExpiry). mosquitto_pub publishes them, mosquitto_sub resumes the
// session and must get nothing.
func TestRestoredExpires(t *testing.T) {
	e := newEnv(t, nil)
	const id, watchID, pubID = "exp-restored", "exp-rwatch", "urn:exp:rpub"
	w := mustDial(t, e.addr, persistentAs(e.thing(t, "urn:exp:restored"), id, 8))
	w.mustSub("lmos/v1/things/+/td")
	w.close()
	pub := e.thing(t, pubID)
	retained := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/properties/p"
	event := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/e"
	watch := e.thing(t, "urn:exp:rwatch")
	w = mustDial(t, e.addr, persistentAs(watch, watchID, 3600))
	w.mustSub(event)
	w.close()
	as := func(c *credentials) []string {
		host, port, _ := net.SplitHostPort(e.addr)
		return []string{"-h", host, "-p", port, "-V", "mqttv5", "-u", c.Username, "-P", c.Password}
	}
	runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-rpub", "-t", retained, "-m", "r", "-r", "-q", "1",
		"-D", "publish", "message-expiry-interval", "2")...)
	runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-rpub", "-t", event, "-m", "e", "-q", "1",
		"-D", "publish", "message-expiry-interval", "2")...)
	e.restart()
	if _, ok := e.b.server.Clients.Get(id); !ok {
		t.Fatal("the store did not keep the 8 s session across the restart")
	}
	if _, ok := e.b.server.Topics.Retained.Get(retained); !ok {
		t.Fatal("the store did not keep the retained message across the restart")
	}
	cl, ok := e.b.server.Clients.Get(watchID)
	if !ok || cl.State.Inflight.Len() != 1 {
		t.Fatal("the store did not keep the offline session's message across the restart")
	}
	// The messages go at their own deadline, before the session's.
	testwait.Eventually(t, 5*time.Second, "restored messages expired", func() bool {
		_, message := e.b.server.Topics.Retained.Get(retained)
		return !message && cl.State.Inflight.Len() == 0
	})
	if _, ok := e.b.server.Clients.Get(id); !ok {
		t.Fatal("the 8 s session expired with the 2 s messages")
	}
	testwait.Eventually(t, 10*time.Second, "restored session expired", func() bool {
		_, session := e.b.server.Clients.Get(id)
		return !session
	})
	if subs := e.b.server.Topics.Subscribers("lmos/v1/things/urn:x/td"); len(subs.Subscriptions) != 0 {
		t.Errorf("the expired session's subscription stayed in the topic index: %v", subs.Subscriptions)
	}
	if got := runMosquitto(t, 27, "mosquitto_sub", append(as(watch), "-i", watchID, "-c", "-x", "3600", "-t", event,
		"-q", "1", "-C", "1", "-W", "1")...); got != "" {
		t.Fatalf("an expired message was delivered to the resumed session: %q", got)
	}
}

// runMosquitto runs a mosquitto client to its end and returns its output;
// a timeout (-W) ends mosquitto_sub with 27, which is what wantCode says
// is expected.
func runMosquitto(t *testing.T, wantCode int, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, requireBin(t, name), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if code != wantCode {
		t.Fatalf("%s %v: exit %d, want %d: %s", name, args, code, wantCode, errb.String())
	}
	return out.String()
}
