package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/chat/internal/jinja"
)

// Message is one turn of a conversation. The template sees it as a dict
// with "role", "content" and the Fields.
type Message struct {
	// Role is the speaker: "system", "user", "assistant", "tool", ...
	Role string
	// Content is a string, nil (the template sees None, as for an
	// assistant turn of only tool calls), or a list of parts such as
	// []any{map[string]any{"type": "text", "text": "..."}} or a
	// json.RawMessage.
	Content any
	// Fields are the message's other fields: tool_calls, reasoning_content,
	// name, tool_call_id, ... Go maps reach the template sorted by key;
	// json.RawMessage values keep their key order.
	Fields map[string]any

	// keys is the order of the keys a message read from JSON had; the
	// template sees the message with those keys only, in that order.
	keys []string
}

// UnmarshalJSON reads a message object, keeping every field (and their
// order) for the template.
func (m *Message) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("a message must be a JSON object")
	}
	*m = Message{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if !slices.Contains(m.keys, key) {
			m.keys = append(m.keys, key)
		}
		switch key {
		case "role":
			if err := json.Unmarshal(raw, &m.Role); err != nil {
				return fmt.Errorf("role: want a string")
			}
		case "content":
			var s string
			switch {
			case string(raw) == "null":
				m.Content = nil
			case json.Unmarshal(raw, &s) == nil:
				m.Content = s
			default:
				m.Content = raw
			}
		default:
			if m.Fields == nil {
				m.Fields = map[string]any{}
			}
			m.Fields[key] = raw
		}
	}
	_, err := dec.Token()
	return err
}

// MarshalJSON writes the message as a JSON object.
func (m Message) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.order() {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		b.Write(key)
		b.WriteByte(':')
		val, err := json.Marshal(m.get(k))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// get is the message's field k: role, content or one of Fields.
func (m *Message) get(k string) any {
	switch k {
	case "role":
		return m.Role
	case "content":
		return m.Content
	}
	return m.Fields[k]
}

// order lists the message's keys in the order the template sees them:
// those read from JSON in their order (less any field since deleted), then
// role, content and the other fields sorted.
func (m *Message) order() []string {
	var keys []string
	if m.keys == nil {
		keys = []string{"role", "content"}
	}
	for _, k := range m.keys {
		if _, ok := m.Fields[k]; ok || k == "role" || k == "content" {
			keys = append(keys, k)
		}
	}
	for _, k := range sortedKeys(m.Fields) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// value is the message as the template sees it.
func (m *Message) value() (jinja.Value, error) {
	d := jinja.NewDict()
	for _, k := range m.order() {
		c, err := jinja.FromGo(m.get(k))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		d.Set(k, c)
	}
	return d, nil
}

// ParseMessages reads a conversation from JSON: an array of messages, or
// an object with a "messages" array.
func ParseMessages(data []byte) ([]Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var wrapper struct {
			Messages *json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(data, &wrapper); err != nil {
			return nil, fmt.Errorf("chat: messages JSON: %w", err)
		}
		if wrapper.Messages == nil {
			return nil, fmt.Errorf("chat: messages JSON: an object needs a \"messages\" array")
		}
		data = *wrapper.Messages
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("chat: messages JSON: want an array of messages: %w", err)
	}
	msgs := make([]Message, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return nil, fmt.Errorf("chat: messages JSON: messages[%d]: %w", i, err)
		}
	}
	return msgs, nil
}
