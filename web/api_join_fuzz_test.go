package web

import (
	"encoding/json"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The bulk deny body (POST /api/join/pending/deny) is read from an admin,
// but its reader must never panic, must refuse anything but one object of
// known members with a filter that selects something (400 invalid), and
// what it accepts must read back the same from its own canonical form.
func FuzzParseDenyFilter(f *testing.F) {
	for _, s := range []string{
		`{"all": true}`, `{"source": "127.0.0.5"}`, `{"olderThan": "48h"}`, `{"source": "2001:db8::/64", "olderThan": "90m"}`,
		`{}`, `null`, `[1]`, `"all"`, ``, `{"all": true} {"all": false}`, `{"all": true}x`, `{"all": true}  `,
		`{"all": true, "source": "10.0.0.1"}`, `{"olderThan": "-1h"}`, `{"olderThan": "0s"}`, `{"olderThan": "9999999999h"}`,
		`{"olderThan": "2562047h47m16.854775807s"}`, `{"olderThan": "NaN"}`, `{"olderThan": "1e308h"}`, `{"olderThan": 5}`,
		`{"source": "10.0.0.0/8"}`, `{"source": "2001:db8::1/64"}`, `{"source": "fe80::1%eth0"}`, `{"source": "::ffff:10.0.0.1"}`,
		`{"everything": true}`, `{"all": "yes"}`, `{"ALL": true}`, `{"all": true, "all": false}`, `{"source": "\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		flt, err := parseDenyFilter(body)
		if err != nil {
			if hub.ErrorCode(err) != hub.EINVALID || err.Error() == "" {
				t.Fatalf("%q: refused with %v, want invalid", body, err)
			}
			return
		}
		if err := flt.Check(); err != nil {
			t.Fatalf("%q: accepted %+v that DenyAll refuses: %v", body, flt, err)
		}
		canon := map[string]any{}
		if flt.All {
			canon["all"] = true
		}
		if flt.Source != "" {
			canon["source"] = flt.Source
		}
		if flt.OlderThan != 0 {
			canon["olderThan"] = flt.OlderThan.String()
		}
		b, _ := json.Marshal(canon)
		again, err := parseDenyFilter(b)
		if err != nil || again != flt {
			t.Fatalf("%q: %+v reads back from %s as %+v, %v", body, flt, b, again, err)
		}
	})
}
