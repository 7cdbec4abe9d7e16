package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A property value of the agent that does not decode is a failure of the
// agent (502), whether the consumer wants another encoding or the same.
func TestProxyReadPropertyUndecodableIs502(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	base := "/proxy/" + pathEscape(agentID) + "/properties/"
	// "power"'s form says CBOR, "mode"'s JSON; neither payload decodes.
	a.mc.pub("lmos/v1/things/"+a.tid+"/properties/power", []byte{0xff, 0x00}, true)
	a.mc.pub("lmos/v1/things/"+a.tid+"/properties/mode", []byte("not json {"), true)
	waitFor(t, 2*time.Second, "retained values", func() bool {
		resp, _ := h.request("GET", base+"mode", "", "", nil, "")
		return resp.StatusCode != http.StatusServiceUnavailable
	})
	for _, c := range []struct{ name, accept string }{
		{"power", ""}, {"power", "application/cbor"}, {"mode", ""}, {"mode", "application/cbor"},
	} {
		resp, body := h.request("GET", base+c.name, "", c.accept, nil, "")
		p := expectProblem(t, resp, body, http.StatusBadGateway, "not valid")
		if p.Type != lmos.ErrorTypeBase+hub.EFAILED {
			t.Errorf("%s as %q: type %q", c.name, c.accept, p.Type)
		}
	}
	// A valid value still reads.
	a.mc.pub("lmos/v1/things/"+a.tid+"/properties/mode", []byte(`"eco"`), true)
	if resp, body := h.request("GET", base+"mode", "", "", nil, ""); resp.StatusCode != 200 || string(body) != `"eco"` {
		t.Fatalf("valid value: %d %q", resp.StatusCode, body)
	}
}

// A result of the agent in the consumer's own encoding that does not
// decode is a failure (502), not passed through.
func TestProxyInvokeUndecodableSameEncodingIs502(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	type answer struct {
		resp *http.Response
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		resp, body := h.request("POST", actionPath(agentID, "never"), "application/json", "application/json", []byte(`{}`), testToken)
		got <- answer{resp, body}
	}()
	p := a.request("lmos/v1/things/" + a.tid + "/actions/never")
	a.reply(p, "completed", "application/json", []byte(`{"sum": 3`))
	ans := <-got
	expectProblem(t, ans.resp, ans.body, http.StatusBadGateway, "not valid")
}

// A consumer that reads its event stream slowly must not stall the agent's
// MQTT connection: results are handed over without waiting, intermediate
// ones beyond the buffer are dropped, the final one always gets through.
func TestProxySlowSSEConsumerDoesNotStallAgent(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	conn, err := net.Dial("tcp", h.Main.HTTPAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nContent-Length: 0\r\n\r\n",
		actionPath(agentID, "never"), h.Main.HTTPAddr.String(), testToken)
	p := a.request("lmos/v1/things/" + a.tid + "/actions/never")
	big := []byte(`"` + string(bytes.Repeat([]byte("x"), 200<<10)) + `"`)
	start := time.Now()
	for range 300 {
		a.reply(p, "running", "application/json", big)
	}
	a.reply(p, "completed", "application/json", []byte(`1`))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := a.mc.C.Publish(ctx, &paho.Publish{Topic: "lmos/v1/things/" + a.tid + "/events/alarm", Payload: []byte(`1`), QoS: 1}); err != nil {
		t.Fatalf("the agent's connection is stalled by a slow SSE consumer: %v after %v", err, time.Since(start))
	}
	// The consumer now reads everything: the final result is its last event.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf bytes.Buffer
	chunk := make([]byte, 1<<20)
	for !bytes.Contains(buf.Bytes(), []byte("event: completed\ndata: 1\n\n")) {
		n, err := conn.Read(chunk)
		buf.Write(chunk[:n])
		if err != nil {
			t.Fatalf("no completed event (%d bytes read): %v", buf.Len(), err)
		}
	}
	if n := bytes.Count(buf.Bytes(), []byte("event: running\n")); n == 0 || n >= 300 {
		t.Errorf("%d running events, want some dropped", n)
	}
}
