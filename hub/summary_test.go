package hub_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// upgradeTD is the Thing of TestSummaryStoredByEarlierHub.
const upgradeTD = `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:t:lamp","title":"Lamp","@type":"lmos:Tool",
"description":"A dimmable lamp","securityDefinitions":{"basic_sc":{"scheme":"basic"}},"security":"basic_sc",
"properties":{"on":{"type":"boolean","title":"On","forms":[{"href":"https://lamp/on"}]}},
"actions":{"setLevel":{"title":"Set level","forms":[{"href":"https://lamp/level"}]}},
"lmos:capabilities":[{"name":"light","examples":["turn on the light"]}]}`

// upgradeSummary is the summary of upgradeTD as the hub stored it before
// the search index was a package of its own (recorded from that code: a
// Put through its registry, read back from the store).
const upgradeSummary = "\x03\x04Lamp\x01\tlmos:Tool\x01\x02on\x01\bsetLevel\x00_\x00\x00\x00\x04lamp\x01\x00\x00\x0fa dimmable lamp" +
	"\x02\x00\x00\x02on\x03\x00\x00\x02on\x02\x01\x00\tset level\x03\x01\x00\tset level\x05\x00\x00\x05light\b\x00\x00\x11turn on the light" +
	"\x01\b\x85\n\x81`\x1a\x12h\x92@\xb9nj\x12\x880\x14\xc0\x96\xb6L@i\xa8D\x00tU\x17\x87\x98N\x04@\xa2\f%\xa0\x00\x90QI\xb8Y\x02\x060" +
	"\x80\xa5\xa9\x89\x00\x1aIN\b4\f\xbc\xff\t\x01r\x96\xaf"

// upgradeHits is what that hub answered to SearchText("light level",
// "Tool", 10) for upgradeTD.
const upgradeHits = `[{"id":"urn:t:lamp","title":"Lamp","score":15,"matches":["/actions/setLevel","/actions/setLevel/title",` +
	`"/lmos:capabilities/0/examples/0","/lmos:capabilities/0/name"]}]`

// rawCountingStore counts the documents read one by one (start-up reads
// one only for a Thing whose stored summary it cannot use).
type rawCountingStore struct {
	*store.DB
	raws atomic.Int64
}

func (s *rawCountingStore) ThingRaw(id string) ([]byte, error) {
	s.raws.Add(1)
	return s.DB.ThingRaw(id)
}

// TestSummaryStoredByEarlierHub: a hub upgraded in place opens the store
// an earlier version wrote, uses the summaries it stored as they are (no
// document is read at start-up) and searches them as that version did; a
// summary of another format is rebuilt from its document instead. A new
// write stores the same bytes the earlier hub did.
func TestSummaryStoredByEarlierHub(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		summary string
		raws    int64
	}{
		{"stored", upgradeSummary, 0},
		{"another format", "\x02" + upgradeSummary[1:], 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := store.Open(dir, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			meta := hub.ThingMeta{Created: now, Modified: now, Size: int64(len(upgradeTD)), Presence: hub.Presence{Status: hub.PresenceUnknown},
				Origin: hub.Origin{Source: hub.SourceHTTP}}
			if err := db.Commit(&hub.Batch{Puts: []hub.ThingRecord{{ID: "urn:t:lamp", Raw: []byte(upgradeTD), Meta: meta, Summary: []byte(c.summary)}}}); err != nil {
				t.Fatal(err)
			}
			s := &rawCountingStore{DB: db}
			t.Cleanup(func() { db.Close() })
			r := newRegistry(t, s, hub.RegistryOptions{Now: func() time.Time { return now }})
			if got := s.raws.Load(); got != c.raws {
				t.Errorf("start-up read %d documents, want %d", got, c.raws)
			}
			th, err := r.Get("urn:t:lamp")
			if err != nil || th.Summary.Title != "Lamp" || !th.Summary.Secured() || !th.Summary.HasAffordance("actions", "setLevel") ||
				!reflect.DeepEqual(th.Summary.Types(), []string{"lmos:Tool"}) {
				t.Fatalf("the Thing reads back as %+v, %v", th.Summary, err)
			}
			hits, err := r.SearchText("light level", "Tool", 10)
			if got, _ := json.Marshal(hits); err != nil || string(got) != upgradeHits {
				t.Errorf("text search: %s %v\nwant %s", got, err, upgradeHits)
			}
			for q, want := range map[string]int{`$[?@.title=='Lamp'].id`: 1, `$[?@.title=='Lamp 2'].id`: 0, `$[?@.actions.setLevel].id`: 1} {
				if got, err := r.SearchJSONPath(q); err != nil || len(got) != want {
					t.Errorf("%s: %v %v, want %d results", q, got, err, want)
				}
			}
		})
	}
	// The hub writes the same bytes for the same document.
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Now: func() time.Time { return now }})
	if _, err := r.Put(context.Background(), "urn:t:lamp", []byte(upgradeTD), hub.Origin{Admin: true}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	var stored []byte
	if err := s.LoadThings(func(rec hub.ThingRecord) error { stored = rec.Summary; return nil }); err != nil {
		t.Fatal(err)
	}
	if string(stored) != upgradeSummary {
		t.Errorf("stored summary\n%q\nwant\n%q", stored, upgradeSummary)
	}
}
