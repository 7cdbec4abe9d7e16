package mqtt

import "github.com/eclipse-lmos/lmos-hub/lmos"

// credentials is what the tests read from a join result (lmos.Credentials).
type credentials = lmos.Credentials
