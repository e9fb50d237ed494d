package kmirror.oracle;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Minimal strict JSON reader: objects (LinkedHashMap), arrays (ArrayList), strings, numbers
 * (BigDecimal), true/false, null.
 */
final class Json {
  private final String s;
  private int i;

  private Json(String s) { this.s = s; }

  static Object parse(String text) {
    Json p = new Json(text);
    p.ws();
    Object v = p.value();
    p.ws();
    if (p.i != p.s.length()) throw p.err("trailing characters");
    return v;
  }

  private IllegalArgumentException err(String m) {
    return new IllegalArgumentException("JSON " + m + " at offset " + i);
  }

  private void ws() {
    while (i < s.length() && (s.charAt(i) == ' ' || s.charAt(i) == '\t' || s.charAt(i) == '\n' || s.charAt(i) == '\r')) i++;
  }

  private Object value() {
    if (i >= s.length()) throw err("unexpected end");
    char c = s.charAt(i);
    switch (c) {
      case '{': return object();
      case '[': return array();
      case '"': return string();
      case 't': return word("true", Boolean.TRUE);
      case 'f': return word("false", Boolean.FALSE);
      case 'n': return word("null", null);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        throw err("unexpected character '" + c + "'");
    }
  }

  private Object word(String w, Object v) {
    if (!s.startsWith(w, i)) throw err("bad literal");
    i += w.length();
    return v;
  }

  private Map<String, Object> object() {
    Map<String, Object> m = new LinkedHashMap<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == '}') {
      i++;
      return m;
    }
    while (true) {
      ws();
      if (i >= s.length() || s.charAt(i) != '"') throw err("expected a key");
      String k = string();
      ws();
      if (i >= s.length() || s.charAt(i) != ':') throw err("expected ':'");
      i++;
      ws();
      if (m.containsKey(k)) throw err("duplicate key " + k);
      m.put(k, value());
      ws();
      if (i >= s.length()) throw err("unterminated object");
      char c = s.charAt(i++);
      if (c == '}') return m;
      if (c != ',') throw err("expected ',' or '}'");
    }
  }

  private List<Object> array() {
    List<Object> l = new ArrayList<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == ']') {
      i++;
      return l;
    }
    while (true) {
      ws();
      l.add(value());
      ws();
      if (i >= s.length()) throw err("unterminated array");
      char c = s.charAt(i++);
      if (c == ']') return l;
      if (c != ',') throw err("expected ',' or ']'");
    }
  }

  private String string() {
    StringBuilder sb = new StringBuilder();
    i++;
    while (true) {
      if (i >= s.length()) throw err("unterminated string");
      char c = s.charAt(i++);
      if (c == '"') return sb.toString();
      if (c < 0x20) throw err("raw control character in string");
      if (c != '\\') {
        sb.append(c);
        continue;
      }
      if (i >= s.length()) throw err("bad escape");
      char e = s.charAt(i++);
      switch (e) {
        case '"': sb.append('"'); break;
        case '\\': sb.append('\\'); break;
        case '/': sb.append('/'); break;
        case 'b': sb.append('\b'); break;
        case 'f': sb.append('\f'); break;
        case 'n': sb.append('\n'); break;
        case 'r': sb.append('\r'); break;
        case 't': sb.append('\t'); break;
        case 'u':
          if (i + 4 > s.length()) throw err("bad \\u escape");
          sb.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
          i += 4;
          break;
        default: throw err("bad escape \\" + e);
      }
    }
  }

  private BigDecimal number() {
    int st = i;
    if (s.charAt(i) == '-') i++;
    while (i < s.length() && "0123456789.eE+-".indexOf(s.charAt(i)) >= 0) i++;
    try {
      return new BigDecimal(s.substring(st, i));
    } catch (NumberFormatException e) {
      throw err("bad number " + s.substring(st, i));
    }
  }

  static String brief(Object j) {
    if (j == null) return "null";
    if (j instanceof String) {
      StringBuilder sb = new StringBuilder();
      Tree.writeString(sb, (String) j);
      return sb.toString();
    }
    String t = j.toString();
    return t.length() > 80 ? t.substring(0, 77) + "..." : t;
  }
}
