package federation_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// mirrored waits until at lists id as a mirror of from's Thing.
func mirrored(t *testing.T, at, from *hubtest.Hub, id string) {
	t.Helper()
	waitUntil(t, id+" mirrored at "+at.URL, func() bool {
		th, err := at.Main.Registry.Get(id)
		return err == nil && th.Meta.Origin.Source == hub.SourceRemote && th.Meta.Origin.Hub == from.URL
	})
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
		c.Close()
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
	hubs := startHubs(t, 2, func(c *hubtest.Config) { c.HTTP.ProxyTimeout = hubtest.Duration(5 * time.Minute) })
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
	p := lmos.Problem{}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("invoke with the home hub down: %d, want 503", resp.StatusCode)
	}
	_ = p
}
