package mcpdoor

import (
	"context"
	"net/url"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Each Thing's TD is a resource, lmos://things/{id}, and each readable
// property's value lmos://things/{id}/properties/{name} (PROTOCOL §11.5).
// Ids are percent-encoded as RFC 6570 simple expansion does.

const (
	thingScheme = "lmos://things/"
	mediaTD     = "application/td+json"
)

func thingURI(id string) string { return thingScheme + escape(id) }

// thingResource is the resource of a Thing's TD.
func thingResource(id, title string) *mcp.Resource {
	return &mcp.Resource{URI: thingURI(id), Name: id, Title: title, Description: "The Thing Description of " + title, MIMEType: mediaTD}
}

// escape percent-encodes all but RFC 3986's unreserved characters.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
	}
	return b.String()
}

// thingTemplate is the resource template of the TDs.
var thingTemplate = &mcp.ResourceTemplate{URITemplate: thingScheme + "{id}", Name: "thing-description", Title: "Thing Description",
	Description: "The W3C WoT Thing Description of a Thing registered on the hub, by its id.", MIMEType: mediaTD}

func (d *Door) addResourceTemplates() {
	d.srv.AddResourceTemplate(thingTemplate, d.readResource)
	d.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: thingScheme + "{id}/properties/{name}", Name: "property-value", Title: "Property value",
		Description: "The current value of a readable property of a Thing, read from the Thing.", MIMEType: "application/json"}, d.readResource)
}

// parseThingURI splits a resource URI into a Thing id and a property name
// ("" for the TD).
func parseThingURI(uri string) (id, property string, ok bool) {
	rest, found := strings.CutPrefix(uri, thingScheme)
	if !found || rest == "" {
		return "", "", false
	}
	enc, prop, hasProp := strings.Cut(rest, "/properties/")
	if enc == "" || strings.Contains(enc, "/") || hasProp && (prop == "" || strings.Contains(prop, "/")) {
		return "", "", false
	}
	id, err := url.PathUnescape(enc)
	if err != nil {
		return "", "", false
	}
	if hasProp {
		if property, err = url.PathUnescape(prop); err != nil {
			return "", "", false
		}
	}
	return id, property, true
}

func (d *Door) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, prop, ok := parseThingURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	c := d.callerOf(req.Extra)
	if prop != "" {
		// A property is read from the Thing: a call, in a call's slot.
		if !d.slot() {
			return nil, d.busy()
		}
		defer d.release()
		data, err := d.read(ctx, c, id, prop)
		if err != nil {
			if hub.ErrorCode(err) == hub.ENOTFOUND {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
	}
	t, err := d.reg.Get(id)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err := d.access.Allow(c.p, hub.OpReadDirectory, &t); err != nil {
		return nil, err
	}
	var td []byte
	if err := d.reg.EachEnrichedJSON([]*hub.Thing{&t}, func(doc []byte) error { td = append([]byte(nil), doc...); return nil }); err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mediaTD, Text: string(td)}}}, nil
}
