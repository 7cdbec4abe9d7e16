package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// GET /api/groups pages from any offset with any limit an int holds: a
// limit near the int's maximum past a non-zero offset overflowed their sum,
// and the slice of the page panicked (the connection dropped without an
// answer). Malformed values are refused 400 with a problem, and no listing
// changes a group.
func TestGroupListPageBounds(t *testing.T) {
	h := startHub(t, nil)
	ctx := context.Background()
	h.put("urn:gp:1", makeTD("urn:gp:1", "one"))
	for _, gid := range []string{"a", "b", "c"} {
		if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: gid, Title: gid, Members: []string{"urn:gp:1"}}); err != nil {
			t.Fatal(err)
		}
	}
	groups := func() string {
		t.Helper()
		resp, body := h.request(http.MethodGet, "/api/groups", "", "", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/groups: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}
	before := groups()
	maxInt := strconv.Itoa(int(^uint(0) >> 1))
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"offset=1&limit=" + maxInt, []string{"b", "c"}},
		{"offset=2&limit=" + maxInt, []string{"c"}},
		{"offset=" + maxInt + "&limit=" + maxInt, []string{}},
		{"offset=" + maxInt, []string{}},
		{"offset=1", []string{"b", "c"}},
	} {
		resp, body := h.request(http.MethodGet, "/api/groups?"+c.query, "", "", nil, "")
		var gs []struct{ ID string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &gs) != nil {
			t.Fatalf("GET /api/groups?%s: %d %s", c.query, resp.StatusCode, body)
		}
		ids := []string{}
		for _, g := range gs {
			ids = append(ids, g.ID)
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") || resp.Header.Get("Link") != "" {
			t.Errorf("GET /api/groups?%s: %v, Link %q; want %v and no next page", c.query, ids, resp.Header.Get("Link"), c.want)
		}
	}
	for _, q := range []string{"offset=-1", "limit=-1", "limit=abc", "offset=1e3", "limit=" + maxInt + "0", "offset=%20"} {
		resp, body := h.request(http.MethodGet, "/api/groups?"+q, "", "", nil, "")
		expectProblem(t, resp, body, http.StatusBadRequest, "non-negative integer")
	}
	if after := groups(); after != before {
		t.Errorf("listings changed the groups:\n%s\n%s", before, after)
	}
}
