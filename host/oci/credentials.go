package oci

import (
	"encoding/json"
	"fmt"
	"os"

	"oras.land/oras-go/v2/registry/remote/credentials"
	"sigs.k8s.io/yaml"
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
	data, err := os.ReadFile(path)
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
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, &probe); err != nil {
		return nil, err
	}
	switch {
	case probe.Kind == "Secret":
		var s pullSecret
		if err := json.Unmarshal(js, &s); err != nil {
			return nil, err
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
