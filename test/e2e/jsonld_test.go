package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// jsonld.js (a JSON-LD 1.1 processor) expands lmos:Agent and the lmos:*
// members the hub adds in every TD the hub serves, to IRIs under
// lmos.ContextLMOS: a TD that does not define lmos (the hub adds it), one
// that defines it with the legacy IRI without '#' (as agents before it
// did; the hub serves the '#' one), and one with the '#' IRI; each as
// GET /things/{id} and in the listing.
func TestServedTDsExpandWithJSONLD(t *testing.T) {
	script := hubtest.InteropScript(t, "jsonld-expand.mjs", "jsonld")
	h := startHub(t, nil)
	tds := map[string]string{
		"urn:ex:ld-none":   `"https://www.w3.org/2022/wot/td/v1.1"`,
		"urn:ex:ld-legacy": `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"` + lmos.ContextLMOSLegacy + `"}]`,
		"urn:ex:ld-hash":   `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"` + lmos.ContextLMOS + `"}]`,
	}
	urls := []string{h.URL + "/things"}
	for id, ctx := range tds {
		h.Put(id, fmt.Appendf(nil, `{"@context":%s,"@type":"lmos:Agent","id":%q,"title":"Agent",`+
			`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`, ctx, id))
		urls = append(urls, h.URL+lmos.ThingPath(id))
	}
	out, err := exec.Command("node", append([]string{script}, urls...)...).Output()
	if err != nil {
		t.Fatalf("jsonld-expand: %v\n%s", err, out)
	}
	agent, presence := lmos.ContextLMOS+"Agent", lmos.ContextLMOS+"presence"
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			URL, ID, Error string
			Types, Keys    []string
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if r.Error != "" {
			t.Fatalf("%s: %s", r.URL, r.Error)
		}
		seen[r.ID]++
		if !slices.Contains(r.Types, agent) {
			t.Errorf("%s (%s): @type expands to %v, want %s", r.ID, r.URL, r.Types, agent)
		}
		if !slices.Contains(r.Keys, presence) {
			t.Errorf("%s (%s): keys %v, want %s", r.ID, r.URL, r.Keys, presence)
		}
	}
	for id := range tds {
		if seen[id] != 2 {
			t.Errorf("%s expanded %d times, want 2 (by id and in the listing)", id, seen[id])
		}
	}
}
