package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/theory/jsonpath"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// TestJSONPathMatchesReference checks the search shortcuts (stored documents
// instead of enriched ones, parallel halves) against the plain definition:
// the query over the array of every enriched TD in id order.
func TestJSONPathMatchesReference(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Now: func() time.Time { return now }})
	ctx := context.Background()
	// More than the parallel threshold, written in batches.
	for i := range 2600 {
		id := fmt.Sprintf("urn:t:%05d", i)
		extra := []string{"actions", fmt.Sprintf(`{"a%d":{"forms":[{"href":"https://x/%d","op":"invokeaction"}]}}`, i%7, i)}
		if i%3 == 0 {
			extra = append(extra, "registration", `{"ttl": 3600}`)
		}
		if i%5 == 0 {
			extra = append(extra, "lmos:capabilities", `[{"name":"cap`+fmt.Sprint(i%11)+`"}]`)
		}
		if _, err := r.Put(ctx, id, testTD(id, fmt.Sprintf("title %d", i%13), extra...), hub.Origin{Source: hub.SourceHTTP}); err != nil {
			t.Fatal(err)
		}
	}
	things, _ := r.List(0, 0)
	all := make([]any, len(things))
	for i, th := range things {
		doc, err := r.Document(th.ID)
		if err != nil {
			t.Fatal(err)
		}
		all[i] = th.Enriched(doc, now)
	}
	queries := []string{
		`$[?@.title=='title 4']`,
		`$[?@.title=='title 4'].id`,
		`$[?@['lmos:capabilities'][?@.name=='cap3']].id`,
		`$[?@.actions.a2].actions.a2.forms[0].href`,
		`$[0]`, `$[-1].title`, `$[10:13]`, `$[2500:2600:33].id`, `$[0,5,2]`,
		`$[*].title`,
		`$[?@.registration.ttl].id`,
		`$[?@['lmos:presence'].status=='unknown'].id`,
		`$..href`,
		`$..[?@.op=='invokeaction'].href`,
		`$[?length(@) > 8].id`,
		`$[?@.title == $[0].title].id`,
		`$[*, ?@.title=='title 1'].id`,
		`$['@context']`,
		`$[?@.id=='urn:t:00007']`,
		// Shapes the Summary prefilter must get right (internal/tdindex/prefilter.go).
		`$[?'title 4'==@.title].id`,
		`$[?@.title=='title 4' || @.title=='title 5'].id`,
		`$[?@.title=='title 4' || @.registration].id`,
		`$[?(@.title=='title 4' || @.title=='title 6') && @['lmos:capabilities']].id`,
		`$[?!(@.title=='title 4')].id`,
		`$[?@.title!='title 4'].id`,
		`$[?@['lmos:capabilities'][?@.name=='cap3' || @.name=='cap4']].id`,
		`$[?@['lmos:capabilities'][*][?@=='cap3']].id`,
		`$[?@..name].id`,
		`$[?@.title=='title == "4"'].id`,
		`$[?@['ti"tle == "x']=='y'].id`,
		`$[?@.title=='no such title'].id`,
		`$[?@.nosuchmember].id`,
		`$[?@.title==@.title].id`,
		`$[?match(@.title, 'title [45]')].id`,
		`$`,
	}
	for _, q := range queries {
		got, err := r.SearchJSONPath(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want := []any(jsonpath.MustParse(q).Select(all))
		if want == nil {
			want = []any{}
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !reflect.DeepEqual(gj, wj) {
			t.Errorf("%s: %d results, reference %d\n got  %.300s\n want %.300s", q, len(got), len(want), gj, wj)
		}
		// The streamed answer is the reference's encoding, byte for byte.
		var buf bytes.Buffer
		if err := r.StreamJSONPath(ctx, "test", q, &buf); err != nil {
			t.Fatalf("%s: stream: %v", q, err)
		}
		if !bytes.Equal(buf.Bytes(), append(wj, '\n')) {
			t.Errorf("%s: streamed %d bytes differ from the reference's %d\n got  %.300s\n want %.300s", q, buf.Len(), len(wj)+1, buf.Bytes(), wj)
		}
	}
}

func TestTextSearchRanking(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	ctx := context.Background()
	put := func(id, title string, extra ...string) {
		t.Helper()
		if _, err := r.Put(ctx, id, testTD(id, title, extra...), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	put("urn:t:a", "Heating controller", "@type", `"lmos:Agent"`,
		"lmos:capabilities", `[{"name":"set temperature","examples":["make it WARMER"]}]`)
	put("urn:t:b", "Temperature logger", "@type", `"lmos:Tool"`, "description", `"Stores temperatures"`)
	put("urn:t:c", "Überwachung", "description", `"Prüft TEMPERATURÄNDERUNGEN"`)
	put("urn:t:d", "Lamp", "actions", `{"setBrightness":{"description":"dims","forms":[{"href":"x"}]}}`)

	hits, err := r.SearchText("temperature", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].ID != "urn:t:b" || hits[1].ID != "urn:t:a" {
		t.Fatalf("temperature: %+v", hits)
	}
	if !reflect.DeepEqual(hits[0].Matches, []string{"/description", "/title"}) {
		t.Errorf("matches = %v", hits[0].Matches)
	}
	// Case-insensitive, also beyond ASCII.
	if hits, _ := r.SearchText("warmer", "Agent", 10); len(hits) != 1 || hits[0].Matches[0] != "/lmos:capabilities/0/examples/0" {
		t.Errorf("warmer: %+v", hits)
	}
	if hits, _ := r.SearchText("temperaturänderungen", "", 10); len(hits) != 1 || hits[0].ID != "urn:t:c" {
		t.Errorf("umlaut: %+v", hits)
	}
	// camelCase affordance names match as words; every word must match.
	if hits, _ := r.SearchText("set brightness", "", 10); len(hits) != 1 || hits[0].ID != "urn:t:d" {
		t.Errorf("set brightness: %+v", hits)
	}
	if hits, _ := r.SearchText("temperature lamp", "", 10); len(hits) != 0 {
		t.Errorf("no Thing has both words: %+v", hits)
	}
	if hits, _ := r.SearchText("temperature", "tool", 10); len(hits) != 1 || hits[0].ID != "urn:t:b" {
		t.Errorf("type filter: %+v", hits)
	}
	if _, err := r.SearchText(" ,; ", "", 10); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("empty query: %v", err)
	}
}
