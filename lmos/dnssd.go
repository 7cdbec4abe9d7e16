package lmos

// DNS-SD names and TXT keys of PROTOCOL §8: the hub advertises its
// directory as ServiceWoT with subtype SubtypeDirectory and its broker as
// ServiceMQTT; agents advertise Things as ServiceWoT. TXT holds the TD's
// path (TXTPath), the kind (TXTType: TypeDirectory or TypeThing) and the
// URL scheme (TXTScheme).
const (
	ServiceWoT       = "_wot._tcp"
	ServiceMQTT      = "_mqtt._tcp"
	SubtypeDirectory = "_directory"
	// ServiceDirectory is the subtype's browse name.
	ServiceDirectory = SubtypeDirectory + "._sub." + ServiceWoT

	TXTPath   = "td"
	TXTType   = "type"
	TXTScheme = "scheme"

	TypeDirectory = "Directory"
	TypeThing     = "Thing"

	// DirectoryPath is the path of the directory's own TD.
	DirectoryPath = "/.well-known/wot"
)
