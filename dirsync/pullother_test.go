package dirsync_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
)

// plainTDD is a directory that answers in the forms the W3C Discovery
// spec allows and lmos-hub does not use, for the paths of the Puller no
// lmos-hub exercises (no other directory installs here): /things as a
// ThingCollection paged by its next member, or as an array paged by
// offset without a Link header; a feed without diff (400 to it) that
// carries ids only; a resumption from an id it no longer has refused with
// 410. It is no directory: only what these paths need.
type plainTDD struct {
	mu         sync.Mutex
	things     map[string][]byte
	collection bool
	seq        int
	feeds      []chan string // frames for the open feeds
	resumes    []string
}

func (d *plainTDD) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case r.URL.Path == "/things":
		d.list(w, r)
	case strings.HasPrefix(r.URL.Path, "/things/"):
		td, ok := d.things[strings.TrimPrefix(r.URL.Path, "/things/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/td+json")
		_, _ = w.Write(td)
	case r.URL.Path == "/events":
		d.feed(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (d *plainTDD) list(w http.ResponseWriter, r *http.Request) {
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range d.things {
			if !yield(id) {
				return
			}
		}
	})
	offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	end := min(offset+limit, len(ids))
	var members []json.RawMessage
	for _, id := range ids[min(offset, len(ids)):end] {
		members = append(members, d.things[id])
	}
	var body any = members
	if d.collection {
		c := map[string]any{"@type": "ThingCollection", "members": members}
		if end < len(ids) {
			c["next"] = fmt.Sprintf("/things?offset=%d&limit=%d", end, limit)
		}
		body = c
	}
	w.Header().Set("Content-Type", "application/ld+json")
	_ = json.NewEncoder(w).Encode(body)
}

func (d *plainTDD) feed(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("diff") {
		http.Error(w, "unknown parameter diff", http.StatusBadRequest)
		return
	}
	last := r.Header.Get("Last-Event-ID")
	d.resumes = append(d.resumes, last)
	if last != "" && last != strconv.Itoa(d.seq) {
		http.Error(w, "gone", http.StatusGone) // it keeps no log
		return
	}
	ch := make(chan string, 64)
	d.feeds = append(d.feeds, ch)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	d.mu.Unlock()
	defer d.mu.Lock()
	for {
		select {
		case <-r.Context().Done():
			return
		case frame, ok := <-ch:
			if !ok {
				return
			}
			_, _ = w.Write([]byte(frame))
			w.(http.Flusher).Flush()
		}
	}
}

// change stores td (nil: deletes id) and tells the open feeds.
func (d *plainTDD) change(typ, id string, td []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if td == nil {
		delete(d.things, id)
	} else {
		d.things[id] = td
	}
	d.seq++
	for _, ch := range d.feeds {
		ch <- fmt.Sprintf("event: %s\nid: %d\ndata: {\"id\":%q}\n\n", typ, d.seq, id)
	}
}

// cut ends the open feeds and forgets the log: a resumption is refused.
func (d *plainTDD) cut(forget bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.feeds {
		close(ch)
	}
	d.feeds = nil
	if forget {
		d.seq += 100
	}
}

func TestPullFromADirectoryInOtherForms(t *testing.T) {
	for _, collection := range []bool{true, false} {
		t.Run(fmt.Sprintf("collection=%v", collection), func(t *testing.T) {
			d := &plainTDD{things: map[string][]byte{}, collection: collection}
			for i := range 12 {
				id := fmt.Sprintf("urn:o:%02d", i)
				d.things[id] = hubtest.BareTD(id, "O")
			}
			srv := httptest.NewServer(d)
			t.Cleanup(srv.Close)
			reg, _ := regtest.Open(t, hub.RegistryOptions{})
			p := startPuller(t, srv.URL, reg, func(c *dirsync.PullConfig) {
				c.PageSize = 5
				c.Filter = func(doc map[string]any) bool { return doc["id"] != "urn:o:11" }
			})
			<-p.Synced()
			if got := len(reg.MirroredFrom(srv.URL)); got != 11 {
				t.Fatalf("%d mirrored, want 11 of 12 (one filtered out)", got)
			}
			// Changes carry ids only: the Puller reads each Thing.
			d.change("thing_created", "urn:o:new", hubtest.BareTD("urn:o:new", "New"))
			eventually(t, "the creation", func() bool { return titleOf(t, reg, "urn:o:new") == "New" })
			d.change("thing_updated", "urn:o:03", hubtest.BareTD("urn:o:03", "Changed"))
			eventually(t, "the update", func() bool { return titleOf(t, reg, "urn:o:03") == "Changed" })
			// The feed drops and the directory forgot its log: the
			// resumption is refused, and a full read finds what changed.
			d.cut(true)
			d.change("", "urn:o:04", nil)
			eventually(t, "the deletion while the feed was down", func() bool {
				_, err := reg.Get("urn:o:04")
				return hub.ErrorCode(err) == hub.ENOTFOUND
			})
			d.mu.Lock()
			resumes := slices.Clone(d.resumes)
			d.mu.Unlock()
			if len(resumes) < 2 || resumes[0] != "" || resumes[1] == "" {
				t.Fatalf("Last-Event-ID of the feeds %q: the drop was not resumed from the last change", resumes)
			}
		})
	}
}
