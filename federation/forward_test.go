package federation_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// mirrored copies from's description of id to at as a mirror, as at's
// mirror of from would, once the agent is online at from: the forwarding
// is tested apart from the mirrors.
func mirrored(t *testing.T, at, from *hubtest.Hub, id string) {
	t.Helper()
	waitUntil(t, id+" online at "+from.URL, func() bool { s, _ := from.Presence(id); return s == hub.PresenceOnline })
	resp, raw := from.Do(http.MethodGet, lmos.ThingPath(id), "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s at %s: %d %s", id, from.URL, resp.StatusCode, raw)
	}
	if _, err := at.Main.Registry.Mirror(context.Background(), id, raw, from.URL); err != nil {
		t.Fatalf("mirror %s: %v", id, err)
	}
}

// TestInvocationsReachAnAgentOnThePeer: agents connected to hub B over
// MQTT and over WebSocket are reached through hub A, paired with B through
// the API alone: A's HTTP proxy (read, write, invoke, streamed partial
// results, observe), and consumers on A's MQTT and WebSocket doors.
func TestInvocationsReachAnAgentOnThePeer(t *testing.T) {
	hubs := startHubs(t, 2, nil)
	a, b := hubs[0], hubs[1]
	pairAll(t, a, b)
	mqID, wsID := "urn:example:fed-mqtt", "urn:example:fed-ws"
	mq := serveCounter(t, mqttURL(b), mqID)
	serveCounter(t, wsURL(b), wsID)
	mirrored(t, a, b, mqID)
	mirrored(t, a, b, wsID)
	for _, id := range []string{mqID, wsID} {
		p := "/proxy/" + id
		resp, body := a.Do(http.MethodPost, p+"/actions/count", "", nil, "")
		if resp.StatusCode != http.StatusOK || compact(body) != `{"by":"`+id+`"}` {
			t.Fatalf("%s: invoke through A: %d %s", id, resp.StatusCode, body)
		}
		resp, body = a.Request(http.MethodPost, p+"/actions/count", "", "text/event-stream", nil, "")
		if resp.StatusCode != http.StatusOK || strings.Count(string(body), "event: running") != 3 || !strings.Contains(string(body), "event: completed\ndata: {\"by\":\""+id+"\"}") {
			t.Fatalf("%s: streamed invoke through A: %d %s", id, resp.StatusCode, body)
		}
		waitUntil(t, id+" temp through A", func() bool {
			resp, body = a.Do(http.MethodGet, p+"/properties/temp", "", nil, "")
			return resp.StatusCode == http.StatusOK && string(body) == "21.5"
		})
		resp, body = a.Do(http.MethodPut, p+"/properties/mode", lmos.MediaJSON, []byte(`"eco"`), "")
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%s: write through A: %d %s", id, resp.StatusCode, body)
		}
		waitUntil(t, id+" mode written", func() bool {
			resp, body = b.Do(http.MethodGet, p+"/properties/mode", "", nil, "")
			return string(body) == `"eco"`
		})
		resp, body = a.Do(http.MethodPost, p+"/actions/nope", "", nil, "")
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: unknown action through A: %d %s", id, resp.StatusCode, body)
		}
	}
	observeThroughA(t, a, mq, mqID)

	// Consumers on A's MQTT and WebSocket doors.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, door := range []string{mqttURL(a), wsURL(a)} {
		c, err := agent.Connect(ctx, agent.Options{URL: door, TD: map[string]any{"id": "urn:example:consumer-" + door[:2], "title": "consumer"}, Logger: hubtest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{mqID, wsID} {
			var partials int
			out, err := c.Invoke(ctx, id, "count", nil, agent.WithPartial(func(agent.Output) { partials++ }))
			if err != nil || compact(out.Payload) != `{"by":"`+id+`"}` {
				t.Fatalf("%s consumer invokes %s: %s %v", door, id, out.Payload, err)
			}
			if partials != 3 {
				t.Errorf("%s consumer invokes %s: %d partial results, want 3", door, id, partials)
			}
		}
		if door == wsURL(a) {
			subscribeThroughA(ctx, t, c, mq, mqID)
		}
		c.Close()
	}
}

// subscribeThroughA subscribes a WebSocket consumer of A to the event
// alarm of id, which B's agent ag then emits.
func subscribeThroughA(ctx context.Context, t *testing.T, c, ag *agent.Agent, id string) {
	t.Helper()
	events := make(chan string, 4)
	stop, err := c.Subscribe(ctx, id, "alarm", func(v agent.Value) { j, _ := v.JSON(); events <- string(j) })
	if err != nil {
		t.Fatalf("subscribe through A: %v", err)
	}
	defer stop()
	if err := ag.Emit("alarm", map[string]string{"at": "B"}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if compact([]byte(e)) != `{"at":"B"}` {
			t.Fatalf("event through A: %s", e)
		}
	case <-ctx.Done():
		t.Fatal("no event through A")
	}
}

// observeThroughA observes the property temp of id through A's proxy and
// sees a value B's agent sets afterwards.
func observeThroughA(t *testing.T, a *hubtest.Hub, ag *agent.Agent, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/proxy/"+id+"/properties/temp", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("observe through A: %d", resp.StatusCode)
	}
	if err := ag.SetProperty("temp", 30.5); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: 30.5" {
			return
		}
	}
	t.Fatalf("the observation through A ended without 30.5: %v", sc.Err())
}

// TestHomeHubDownIsUnavailable: with B gone, an invocation through A of a
// Thing mirrored from B is refused 503 at once (the connection is
// refused), not after the proxy's timeout.
func TestHomeHubDownIsUnavailable(t *testing.T) {
	hubs := startHubs(t, 2, func(c *app.Config) { c.HTTP.ProxyTimeout = app.Duration(5 * time.Minute) })
	a, b := hubs[0], hubs[1]
	pairAll(t, a, b)
	id := "urn:example:fed-gone"
	serveCounter(t, mqttURL(b), id)
	mirrored(t, a, b, id)
	b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // far below the 5 min proxy timeout
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/proxy/"+id+"/actions/count", nil)
	resp, err := http.DefaultClient.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the invocation hung on the hub that is gone")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p lmos.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
		p.Type != lmos.ErrorTypeBase+hub.EUNAVAILABLE || !strings.Contains(p.Detail, b.URL) {
		t.Fatalf("invoke with the home hub down: %d %+v (%v), want 503 naming %s", resp.StatusCode, p, err, b.URL)
	}
}

// TestForwardedRequestsAreSignedAsThePeer: B lets anonymous clients only
// read, so A's forwarded invocation passes there only as a paired peer's;
// unpaired at B, A's requests have anonymous rights and the invocation is
// refused, saying A may not be paired there. A Thing mirrored from a
// directory that is no paired hub is not forwarded at all.
func TestForwardedRequestsAreSignedAsThePeer(t *testing.T) {
	a := hubtest.Start(t, nil)
	b := hubtest.Start(t, func(c *app.Config) { c.Access.Anonymous = hub.AnonymousRead })
	pairAll(t, a, b)
	id := "urn:example:fed-signed"
	serveCounter(t, mqttURL(b), id)
	mirrored(t, a, b, id)
	if resp, body := b.Do(http.MethodPost, "/proxy/"+id+"/actions/count", "", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous invoke at B: %d %s, want 401", resp.StatusCode, body)
	}
	if resp, body := a.Do(http.MethodPost, "/proxy/"+id+"/actions/count", "", nil, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("invoke through A, paired at B: %d %s", resp.StatusCode, body)
	}
	if resp, body := b.Do(http.MethodDelete, "/api/peers/"+a.Main.DID(), "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("unpair A at B: %d %s", resp.StatusCode, body)
	}
	resp, body := a.Do(http.MethodPost, "/proxy/"+id+"/actions/count", "", nil, "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "is this hub paired there?") {
		t.Fatalf("invoke through A, unpaired at B: %d %s, want 503 saying A is not paired", resp.StatusCode, body)
	}
	// A mirror from a directory that is not a paired hub.
	other := "urn:example:fed-elsewhere"
	if _, err := a.Main.Registry.Mirror(context.Background(), other, tdgen.MakeTD(other, "elsewhere"), "http://127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	resp, body = a.Do(http.MethodPost, "/proxy/"+other+"/actions/run", "", nil, "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not a paired hub") {
		t.Fatalf("invoke a mirror of an unpaired directory: %d %s", resp.StatusCode, body)
	}
}
