package dnssd

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// TDURL is scheme://address:port{td} for e, read from the WoT keys of its
// TXT record (td, scheme; PROTOCOL §8); the address is the first announced
// one (IPv4 first), with the zone for IPv6 link-local. The hub's registrar,
// the agent library and `lmos-hub discover` all read an instance this way.
func (e Entry) TDURL() (string, error) {
	txt := e.TXT()
	path, ok := txt[lmos.TXTPath]
	if !ok {
		return "", errors.New("the TXT record has no td key (PROTOCOL §8 needs td=/path/of/the/TD)")
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n#") || len(path) > 1024 {
		return "", fmt.Errorf("td=%q is not an absolute path", path)
	}
	scheme := strings.ToLower(txt[lmos.TXTScheme])
	switch scheme {
	case "":
		scheme = "http"
	case "http", "https":
	default:
		return "", fmt.Errorf("scheme=%q is not http or https", txt[lmos.TXTScheme])
	}
	if len(e.IPs) == 0 {
		return "", errors.New("the instance has no address")
	}
	ip := e.IPs[0]
	host := ip.String()
	if ip.To4() == nil && ip.IsLinkLocalUnicast() {
		// The zone, escaped as a URL must (RFC 6874): a bare "%eth0"
		// does not parse, so no link-local TD could be fetched.
		host += "%25" + e.Iface
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(e.Port)) + path, nil
}
