package lmos

import (
	"encoding/json"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPeerProblem(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6,000 bytes
	p := PeerProblem(map[string]any{"type": 7, "title": "Jammed", "detail": long, "status": "503", "instance": []any{}})
	if p.Type != "" || p.Title != "Jammed" || p.Instance != "" || p.Status != 503 {
		t.Errorf("problem %+v", p)
	}
	if len(p.Detail) > 4096 || !utf8.ValidString(p.Detail) || len(p.Detail) < 4094 {
		t.Errorf("detail cut to %d bytes (valid UTF-8: %v)", len(p.Detail), utf8.ValidString(p.Detail))
	}
	for _, c := range []struct {
		status any
		want   int
	}{
		{json.Number("502"), 502}, {float64(503), 503}, {uint64(504), 504}, {int64(400), 400},
		{"x", 0}, {nil, 0}, {json.Number("1e400"), 0}, {new(big.Int).Lsh(big.NewInt(1), 80), 0}, {true, 0},
	} {
		if got := PeerProblem(map[string]any{"status": c.status}).Status; got != c.want {
			t.Errorf("status %v: %d, want %d", c.status, got, c.want)
		}
	}
	if p := PeerProblem(nil); !reflect.DeepEqual(p, Problem{}) {
		t.Errorf("nil object: %+v", p)
	}
}

func TestTruncateKeepsCharacters(t *testing.T) {
	if got := Truncate("aé", 2); got != "a" {
		t.Errorf("Truncate cut a character: %q", got)
	}
	if got := Truncate("abc", 5); got != "abc" {
		t.Errorf("short string changed: %q", got)
	}
}

func TestJoinResultRoundTrip(t *testing.T) {
	in := JoinResult{Status: JoinAccepted, ID: "urn:x", Credentials: &Credentials{Username: "urn:x", Password: "pw"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":"accepted","id":"urn:x","credentials":{"username":"urn:x","password":"pw"}}`; string(b) != want {
		t.Errorf("wire form %s, want %s", b, want)
	}
	var out JoinResult
	if err := json.Unmarshal(b, &out); err != nil || out.Status != in.Status || out.ID != in.ID || *out.Credentials != *in.Credentials || out.Problem != nil {
		t.Errorf("round trip: %+v, %v", out, err)
	}
	rej, _ := json.Marshal(JoinResult{Status: JoinRejected, Problem: &Problem{Type: ErrorTypeBase + CodeInvalid, Title: "Bad Request", Status: 400}})
	if want := `{"status":"rejected","problem":{"type":"` + ErrorTypeBase + `invalid","title":"Bad Request","status":400}}`; string(rej) != want {
		t.Errorf("rejection %s", rej)
	}
}

func TestWSMessageType(t *testing.T) {
	for in, want := range map[string]string{
		"subscribeevent": WSSubscribeEvent, "READPROPERTY": WSReadProperty, "actionStatus": WSActionStatus,
		"Error": WSError, "Nonsense": "nonsense",
	} {
		if got := WSMessageType(in); got != want {
			t.Errorf("WSMessageType(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEncodeCBORShortestFloat(t *testing.T) {
	b, err := EncodeCBOR(map[string]any{"a": 1.5})
	// 0xa1 map(1), 0x61 'a', 0xf9 3e00: 1.5 as float16.
	if err != nil || string(b) != "\xa1\x61a\xf9\x3e\x00" {
		t.Errorf("EncodeCBOR = %x, %v", b, err)
	}
}
