package oci

import (
	"encoding/json"
	"errors"
	"fmt"

	"oras.land/oras-go/v2/registry/remote/credentials"
	"sigs.k8s.io/yaml"

	"github.com/wasp-proxy/wasp/internal/localfile"
)

// pullSecret is the part of a Kubernetes Secret of type
// kubernetes.io/dockerconfigjson that holds the credentials.
type pullSecret struct {
	Kind       string            `json:"kind"`
	Data       map[string][]byte `json:"data"`       // base64 in the object
	StringData map[string]string `json:"stringData"` // as written by hand
}

// loadCredentialFile reads a docker config file, a Secret's
// .dockerconfigjson as mounted from a secret volume (the same format), or a
// Secret object in JSON or YAML.
func loadCredentialFile(path string) (credentials.Store, error) {
	data, err := localfile.Read(path, localfile.MaxKeyFileSize)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	cfg, err := dockerConfigJSON(data)
	if err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", path, err)
	}
	s, err := credentials.NewMemoryStoreFromDockerConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", path, err)
	}
	return s, nil
}

// dockerConfigJSON returns the docker config in a credential file.
func dockerConfigJSON(data []byte) ([]byte, error) {
	var probe struct {
		Kind  string          `json:"kind"`
		Auths json.RawMessage `json:"auths"`
	}
	// The parsers' errors quote the text they choke on: a secret.
	errSyntax := errors.New("not JSON or YAML (the file's content is not shown)")
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, errSyntax
	}
	if err := json.Unmarshal(js, &probe); err != nil {
		return nil, errSyntax
	}
	switch {
	case probe.Kind == "Secret":
		var s pullSecret
		if err := json.Unmarshal(js, &s); err != nil {
			return nil, errors.New("not a Kubernetes Secret (the file's content is not shown)")
		}
		if v, ok := s.StringData[".dockerconfigjson"]; ok {
			return []byte(v), nil
		}
		if v, ok := s.Data[".dockerconfigjson"]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("secret has no .dockerconfigjson (want a Secret of type kubernetes.io/dockerconfigjson)")
	case probe.Auths != nil:
		return js, nil
	}
	return nil, fmt.Errorf(`neither a docker config ("auths") nor a Kubernetes pull secret`)
}
