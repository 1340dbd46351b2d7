package floodgatetest

import (
	"errors"

	kjson "sigs.k8s.io/json"
)

// StrictJSON decodes as the Kubernetes API server does: field names are
// case-sensitive, and an unknown or duplicate field is an error
// (sigs.k8s.io/json, which the API server uses). The tests of the shipped
// manifests and of the Compose file read them with it.
func StrictJSON(data []byte, into any) error {
	strict, err := kjson.UnmarshalStrict(data, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
