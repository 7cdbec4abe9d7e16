package mdns

import (
	"fmt"
	"io"
)

// WritePrometheus writes the mDNS figures of h for /metrics; h nil (mDNS
// off or failed) writes them as zero, so that a dashboard's queries keep
// their series.
func WritePrometheus(w io.Writer, h *Hub) {
	var announced uint64
	var st RegistrarStats
	if h != nil {
		if a := h.Advertiser(); a != nil {
			announced = a.Announcements()
		}
		st = h.Registrar.Stats()
	}
	fmt.Fprintf(w, "# HELP lmos_mdns_announcements_total Unsolicited mDNS announcements of the hub's services sent, one per network interface and round.\n# TYPE lmos_mdns_announcements_total counter\nlmos_mdns_announcements_total %d\n", announced)
	fmt.Fprintf(w, "# HELP lmos_mdns_things_total Things announced over mDNS, by what the hub did with the announcement: registered (new or changed description stored), unchanged, pending (parked for approval), rejected, offline (goodbye or expiry), forgotten, dropped (queue full).\n# TYPE lmos_mdns_things_total counter\n")
	for _, c := range []struct {
		result string
		n      uint64
	}{{"registered", st.Registered}, {"unchanged", st.Unchanged}, {"pending", st.Parked}, {"rejected", st.Rejected},
		{"offline", st.Offline}, {"forgotten", st.Forgotten}, {"dropped", st.Dropped}} {
		fmt.Fprintf(w, "lmos_mdns_things_total{result=%q} %d\n", c.result, c.n)
	}
}
