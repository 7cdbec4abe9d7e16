package mdns

import (
	"net"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
)

// An announcement whose TXT record cannot name a TD is refused as invalid
// input (EINVALID, not an internal error), with dnssd's reason as the
// whole message, before anything is fetched.
func TestRegistrarRefusesBadTXTAsInvalid(t *testing.T) {
	r := &Registrar{}
	ip := []net.IP{net.IPv4(127, 0, 0, 1)}
	for _, c := range []struct {
		name string
		e    dnssd.Entry
		want string
	}{
		{"no td", dnssd.Entry{Text: []string{"type=Thing"}, IPs: ip, Port: 1}, "the TXT record has no td key (PROTOCOL §8 needs td=/path/of/the/TD)"},
		{"relative td", dnssd.Entry{Text: []string{"td=td.json"}, IPs: ip, Port: 1}, `td="td.json" is not an absolute path`},
		{"bad scheme", dnssd.Entry{Text: []string{"td=/td", "scheme=ftp"}, IPs: ip, Port: 1}, `scheme="ftp" is not http or https`},
		{"no address", dnssd.Entry{Text: []string{"td=/td"}, Port: 1}, "the instance has no address"},
	} {
		_, _, err := r.fetch(c.e)
		if hub.ErrorCode(err) != hub.EINVALID || err.Error() != c.want {
			t.Errorf("%s: error %q (code %s), want %q (%s)", c.name, err, hub.ErrorCode(err), c.want, hub.EINVALID)
		}
	}
}
