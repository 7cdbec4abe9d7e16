package dnssd

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
)

// skippedPrefixes name interfaces that are not the LAN: container bridges,
// veth pairs and tunnels. Naming an interface in Interfaces overrides this.
var skippedPrefixes = []string{"docker", "br-", "veth", "virbr", "tun", "tap", "wg", "cni", "flannel", "cali", "vxlan", "zt"}

// selectInterfaces returns the up, multicast-capable, non-loopback
// interfaces with an address: those named when names is not empty, else all
// but the skipped kinds.
func selectInterfaces(names []string) ([]net.Interface, error) {
	all, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("cannot list network interfaces: %w", err)
	}
	var out []net.Interface
	for _, ifi := range all {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagMulticast == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		if len(names) > 0 {
			if !slices.Contains(names, ifi.Name) {
				continue
			}
		} else if skipped(ifi.Name) {
			continue
		}
		if addrs, err := ifi.Addrs(); err != nil || len(addrs) == 0 {
			continue
		}
		out = append(out, ifi)
	}
	return out, nil
}

func skipped(name string) bool {
	for _, p := range skippedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ifaceNets returns the addresses of ifi with their prefixes (IPv4 in
// 4-byte form).
func ifaceNets(ifi *net.Interface) []*net.IPNet {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []*net.IPNet
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			ones, _ := ipn.Mask.Size()
			out = append(out, &net.IPNet{IP: ip4, Mask: net.CIDRMask(ones, 32)})
		} else if ipn.IP.To16() != nil {
			out = append(out, ipn)
		}
	}
	return out
}

// splitNets returns the IPv4 and IPv6 addresses of nets.
func splitNets(nets []*net.IPNet) (v4, v6 []net.IP) {
	for _, n := range nets {
		if ip4 := n.IP.To4(); ip4 != nil {
			v4 = append(v4, ip4)
		} else {
			v6 = append(v6, n.IP)
		}
	}
	return v4, v6
}

// signature describes the selected interfaces and their addresses with
// their prefixes, so a change (an address added, a cable plugged in) can be
// noticed by polling.
func signature(ifs []net.Interface) string {
	var parts []string
	for i := range ifs {
		s := fmt.Sprintf("%d/%s", ifs[i].Index, ifs[i].Name)
		for _, n := range ifaceNets(&ifs[i]) {
			s += " " + n.String()
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, ";")
}
