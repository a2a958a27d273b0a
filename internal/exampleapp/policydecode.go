package exampleapp

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// decodeStrict decodes the next JSON value of dec into v, walking objects
// and arrays itself so that every error names its field by JSON path
// ("policies[2].rate.limit"): encoding/json's own errors name an unknown
// field without its place and an array element without its index. An
// unknown or repeated field is refused (encoding/json would let the last
// of two "limit"s win silently). Leaves (numbers, strings, Duration,
// json.RawMessage) are decoded by encoding/json.
func decodeStrict(dec *json.Decoder, v reflect.Value, path string) error {
	switch {
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return decodeStrict(dec, v.Elem(), path)
	case v.Kind() == reflect.Struct && v.Type() != reflect.TypeOf(Duration(0)):
		return decodeObject(dec, v, path)
	case v.Kind() == reflect.Slice && v.Type() != reflect.TypeOf(json.RawMessage(nil)):
		return decodeArray(dec, v, path)
	}
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fieldErr(path, "not JSON: "+err.Error())
	}
	if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
		return fieldErr(path, leafError(err, v.Type()))
	}
	return nil
}

// decodeObject decodes a JSON object into the struct v, field by json tag.
func decodeObject(dec *json.Decoder, v reflect.Value, path string) error {
	if err := expectDelim(dec, '{', path, "an object"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fieldErr(path, "not JSON: "+err.Error())
		}
		name, _ := tok.(string)
		fpath := joinPath(path, name)
		f, ok := fieldByTag(v, name)
		if !ok {
			return fieldErr(fpath, "unknown field")
		}
		if seen[name] {
			return fieldErr(fpath, "given twice")
		}
		seen[name] = true
		if err := decodeStrict(dec, f, fpath); err != nil {
			return err
		}
	}
	return closeDelim(dec, path)
}

// decodeArray decodes a JSON array into the slice v.
func decodeArray(dec *json.Decoder, v reflect.Value, path string) error {
	if err := expectDelim(dec, '[', path, "an array"); err != nil {
		return err
	}
	v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	for i := 0; dec.More(); i++ {
		e := reflect.New(v.Type().Elem()).Elem()
		if err := decodeStrict(dec, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
		v.Set(reflect.Append(v, e))
	}
	return closeDelim(dec, path)
}

// closeDelim reads the closing delimiter of an object or array at path.
func closeDelim(dec *json.Decoder, path string) error {
	if _, err := dec.Token(); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fieldErr(path, "not JSON: "+err.Error())
	}
	return nil
}

// expectDelim reads the opening delimiter of an object or array.
func expectDelim(dec *json.Decoder, want json.Delim, path, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return fieldErr(path, "not JSON: "+err.Error())
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fieldErr(path, "must be "+what)
	}
	return nil
}

// fieldByTag returns the field of struct v whose json tag names name,
// exactly (encoding/json would also take "LIMIT" for "limit").
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag == name && tag != "" && tag != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// leafError says what a leaf value must be.
func leafError(err error, t reflect.Type) string {
	if _, ok := err.(*json.UnmarshalTypeError); !ok {
		return err.Error() // Duration's own message
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "must be an integer"
	case reflect.String:
		return "must be a string"
	case reflect.Bool:
		return "must be true or false"
	}
	return "must be " + t.String()
}

// joinPath appends a field name to a JSON path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
