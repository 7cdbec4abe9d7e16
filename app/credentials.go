package app

import (
	"context"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// newIssuer is the hub's issuer of membership credentials, signing with
// the hub's own did:key (PROTOCOL §7).
func (m *Main) newIssuer() *hub.CredentialIssuer {
	m.Issuer = hub.NewCredentialIssuer(m.Key, time.Duration(m.Config.Groups.CredentialValidity))
	m.Issuer.SetStatusListValidity(time.Duration(m.Config.Groups.StatusListValidity))
	return m.Issuer
}

// openCredentials tells the issuer the status list's URL, once the HTTP
// listeners are bound and before any door admits a write.
func (m *Main) openCredentials(context.Context) error {
	m.Issuer.SetStatusListURL(m.statusListURL())
	return nil
}

// statusListURL is groups.statusListURL, else the plain HTTP listener's
// URL of the status list (the HTTPS one under tls.only); an unspecified
// host (all interfaces) is replaced by the host name.
func (m *Main) statusListURL() string {
	if u := m.Config.Groups.StatusListURL; u != "" {
		return u
	}
	scheme, addr := "http", m.HTTPAddr
	if addr == nil {
		scheme, addr = "https", m.HTTPSAddr
	}
	return listenerURL(scheme, addr, lmos.StatusListPath)
}
