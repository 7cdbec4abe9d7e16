package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var canonicalEtag = regexp.MustCompile(`^</things>; rel="canonical"; etag="([^"]+)"$`)

// collectionPage is one GET of /things?format=collection as a client sees it.
type collectionPage struct {
	status  int
	etag    string // from the canonical Link
	header  string // the ETag header
	next    bool   // a rel="next" Link
	Total   int    `json:"total"`
	Members []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	} `json:"members"`
	Next string `json:"next"`
}

func (p *collectionPage) ids() string {
	ids := make([]string, len(p.Members))
	for i, m := range p.Members {
		ids[i] = m.ID + " " + m.Title
	}
	return strings.Join(ids, ",")
}

func getCollection(url string) (*collectionPage, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	p := &collectionPage{status: resp.StatusCode, header: resp.Header.Get("ETag")}
	if resp.StatusCode != http.StatusOK {
		return p, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	for _, l := range resp.Header.Values("Link") {
		if m := canonicalEtag.FindStringSubmatch(l); m != nil {
			p.etag = m[1]
		}
		if strings.HasSuffix(l, `rel="next"`) {
			p.next = true
		}
	}
	if p.etag == "" {
		return p, fmt.Errorf("GET %s: no canonical Link with an etag: %q", url, resp.Header.Values("Link"))
	}
	if err := json.Unmarshal(body, p); err != nil {
		return p, fmt.Errorf("GET %s: %v: %s", url, err, body)
	}
	return p, nil
}

// WoT Discovery tdd-things-list-pagination-header-canonicallink (MUST):
// the etag of the canonical Link represents the current state of the
// collection. A client walking the pages notices, by comparing etags, that
// a Thing expired between two page reads.
func TestTDD_things_list_pagination_header_canonicallink_Expiry(t *testing.T) {
	h := startHub(t, nil)
	h.put("urn:ex:a", makeTD("urn:ex:a", "a"))
	expires := time.Now().Add(1500 * time.Millisecond)
	var b map[string]any
	_ = json.Unmarshal(makeTD("urn:ex:b", "b"), &b)
	b["registration"] = map[string]any{"expires": expires.UTC().Format(time.RFC3339Nano)}
	bj, _ := json.Marshal(b)
	h.put("urn:ex:b", bj)
	h.put("urn:ex:c", makeTD("urn:ex:c", "c"))

	p1, err := getCollection(h.URL + "/things?format=collection&limit=1")
	if err != nil {
		t.Fatal(err)
	}
	if p1.Total != 3 || p1.ids() != "urn:ex:a a" || !p1.next {
		t.Fatalf("page 1: total %d, %s, next %v", p1.Total, p1.ids(), p1.next)
	}
	// Read page 2 until urn:ex:b has left the collection: the first
	// answer without it (whether or not the purge has committed yet) must
	// not carry page 1's etag.
	time.Sleep(time.Until(expires) - 100*time.Millisecond)
	deadline := expires.Add(5 * time.Second)
	for {
		p2, err := getCollection(h.URL + "/things?format=collection&offset=1&limit=1")
		if err != nil {
			t.Fatal(err)
		}
		if p2.Total == 3 {
			if p2.etag != p1.etag || p2.ids() != "urn:ex:b b" {
				t.Fatalf("page 2 before expiry: etag %s (page 1: %s), %s", p2.etag, p1.etag, p2.ids())
			}
			if time.Now().After(deadline) {
				t.Fatal("urn:ex:b never expired")
			}
			continue
		}
		if p2.Total != 2 || p2.ids() != "urn:ex:c c" || p2.next {
			t.Errorf("page 2 after expiry: total %d, %s, next %v", p2.Total, p2.ids(), p2.next)
		}
		if p2.etag == p1.etag {
			t.Errorf("etag %s names the collection with and without urn:ex:b: a client walking the pages misses it", p1.etag)
		}
		if !strings.HasPrefix(p2.header, `W/"`+p2.etag+"-") {
			t.Errorf("ETag %q does not follow the canonical etag %s", p2.header, p2.etag)
		}
		return
	}
}

// WoT Discovery tdd-things-list-pagination-header-canonicallink (MUST),
// under concurrent writes: every etag value stands for exactly one
// collection state (pages read with one etag list the same Things and
// total, with the same titles), a page holds as many members as the total allows, and an empty
// page never points to a next one.
func TestTDD_things_list_pagination_header_canonicallink_Concurrent(t *testing.T) {
	h := startHub(t, nil)
	for i := range 8 {
		id := fmt.Sprintf("urn:ex:base%d", i)
		h.put(id, makeTD(id, "base"))
	}
	const limit = 3
	offsets := []int{0, 4, 8}
	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	for w := range 2 {
		writers.Go(func() {
			for i := range 60 {
				id := fmt.Sprintf("urn:ex:a-w%d-%d", w, i%6) // sorts before the base Things
				var req *http.Request
				if i%3 == 2 {
					req, _ = http.NewRequest(http.MethodDelete, h.URL+"/things/"+id, nil)
				} else {
					req, _ = http.NewRequest(http.MethodPut, h.URL+"/things/"+id, strings.NewReader(string(makeTD(id, fmt.Sprint(i)))))
					req.Header.Set("Content-Type", "application/td+json")
				}
				req.Header.Set("Authorization", "Bearer "+testToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("%s %s: %v", req.Method, id, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s %s: %d", req.Method, id, resp.StatusCode)
				}
			}
		})
	}
	type key struct {
		etag   string
		offset int
	}
	var mu sync.Mutex
	seen := map[key]string{}
	reads := 0
	for r := range 3 {
		readers.Go(func() {
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := offsets[(r+i)%len(offsets)]
				p, err := getCollection(fmt.Sprintf("%s/things?format=collection&offset=%d&limit=%d", h.URL, off, limit))
				if err != nil {
					t.Error(err)
					return
				}
				want := min(limit, max(0, p.Total-off))
				if len(p.Members) != want {
					t.Errorf("offset %d: %d members, total %d (etag %s)", off, len(p.Members), p.Total, p.etag)
				}
				if hasNext := off+len(p.Members) < p.Total; p.next != hasNext || (p.Next != "") != hasNext {
					t.Errorf("offset %d: %d members of %d, next Link %v, next member %q", off, len(p.Members), p.Total, p.next, p.Next)
				}
				if !strings.HasPrefix(p.header, `W/"`+p.etag+"-") {
					t.Errorf("ETag %q, canonical etag %s", p.header, p.etag)
				}
				state := fmt.Sprintf("total %d: %s", p.Total, p.ids())
				mu.Lock()
				reads++
				k := key{p.etag, off}
				if prev, ok := seen[k]; ok && prev != state {
					t.Errorf("etag %s at offset %d stands for two states: %s and %s", p.etag, off, prev, state)
				}
				seen[k] = state
				mu.Unlock()
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	t.Logf("%d page reads, %d distinct (etag, offset)", reads, len(seen))
}

// An unpaged list larger than one store read, taken while writes keep
// committing, is always a whole JSON array of one collection state: equal
// etags, equal members; never a truncated body.
func TestTDD_things_list_unpaged_under_writes(t *testing.T) {
	h := startHub(t, nil)
	for i := range 300 {
		id := fmt.Sprintf("urn:ex:big-%03d", i)
		h.put(id, makeTD(id, "big"))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 2000 { // bounded; the write limit may answer 429, which is fine here
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("urn:ex:new-%04d", i)
			req, _ := http.NewRequest(http.MethodPut, h.URL+"/things/"+id, strings.NewReader(string(makeTD(id, "new"))))
			req.Header.Set("Content-Type", "application/td+json")
			req.Header.Set("Authorization", "Bearer "+testToken)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	states := map[string]string{}
	for range 20 {
		resp, err := http.Get(h.URL + "/things")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /things: %d %v", resp.StatusCode, err)
		}
		var list []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("a body of %d bytes is not a whole JSON array: %v", len(body), err)
		}
		ids := make([]string, len(list))
		for i, th := range list {
			ids[i] = th.ID
		}
		got := strings.Join(ids, ",")
		etag := resp.Header.Get("ETag")
		if prev, ok := states[etag]; ok && prev != got {
			t.Fatalf("ETag %s stands for two collections", etag)
		}
		states[etag] = got
	}
	close(stop)
	wg.Wait()
}
