//===- Sampler.cpp - safetensors export and text sampling ----------------===//
#include "stretto/Runtime/Trainer.h"
#include "stretto/Support/Text.h"
#include "stretto/Runtime/PlanExecutor.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

using namespace stretto;

void stretto::saveSafetensors(const std::string &path,
                              const std::map<std::string, HostTensor> &tensors) {
  std::ostringstream header;
  header << "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"stretto\"}";
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    uint64_t bytes = t.data.size() * sizeof(float);
    header << "," << jsonString(name) << ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d)
      header << (d ? "," : "") << t.shape[d];
    header << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
  }
  header << "}";
  std::string h = header.str();
  while (h.size() % 8)
    h += ' '; // the format allows trailing spaces; keeps data 8-aligned
  std::string out;
  uint64_t len = h.size();
  out.append(reinterpret_cast<const char *>(&len), 8);
  out += h;
  for (const auto &[name, t] : tensors)
    for (double v : t.data) {
      float f = static_cast<float>(v);
      out.append(reinterpret_cast<const char *>(&f), 4);
    }
  writeFileAtomically(path, out);
}

namespace {

/// The JSON of a safetensors header: objects, arrays, strings, numbers (all
/// the format uses). Throws a message naming the byte where it went wrong.
struct JsonValue {
  enum Kind { Object, Array, String, Number, Other } kind = Other;
  std::vector<std::pair<std::string, JsonValue>> members; // Object
  std::vector<JsonValue> items;                           // Array
  std::string text;                                       // String
  double number = 0;                                      // Number
};

struct JsonReader {
  const std::string &s;
  size_t i = 0;
  [[noreturn]] void fail(const std::string &what) {
    throw std::runtime_error("bad header JSON at byte " + std::to_string(i) + ": " + what);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
      ++i;
  }
  void expect(char c) {
    ws();
    if (i >= s.size() || s[i] != c)
      fail(std::string("expected '") + c + "'");
    ++i;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') {
        if (++i >= s.size())
          break;
        char e = s[i];
        if (e == 'u') { // \uXXXX (a code point of the BMP) as UTF-8
          if (i + 4 >= s.size())
            fail("truncated \\u escape");
          unsigned cp = static_cast<unsigned>(std::stoul(s.substr(i + 1, 4), nullptr, 16));
          i += 4;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b'
                 : e == 'f' ? '\f' : e; // \" \\ \/ stand for themselves
        }
      } else {
        out += s[i];
      }
      ++i;
    }
    if (i >= s.size())
      fail("unterminated string");
    ++i;
    return out;
  }
  JsonValue value(int depth = 0) {
    if (depth > 16)
      fail("nested too deeply");
    ws();
    JsonValue v;
    if (i >= s.size())
      fail("unexpected end");
    char c = s[i];
    if (c == '{') {
      v.kind = JsonValue::Object;
      ++i;
      ws();
      if (i < s.size() && s[i] == '}')
        return ++i, v;
      while (true) {
        std::string k = str();
        expect(':');
        v.members.emplace_back(k, value(depth + 1));
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == ']')
        return ++i, v;
      while (true) {
        v.items.push_back(value(depth + 1));
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::String;
      v.text = str();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < s.size() && std::strchr("+-0123456789.eE", s[j]))
        ++j;
      v.kind = JsonValue::Number;
      v.number = std::strtod(s.substr(i, j - i).c_str(), nullptr);
      i = j;
      return v;
    }
    for (const char *w : {"true", "false", "null"})
      if (s.compare(i, std::strlen(w), w) == 0) {
        i += std::strlen(w);
        return v;
      }
    fail("unexpected character");
  }
};

const JsonValue *member(const JsonValue &o, const std::string &k) {
  for (const auto &[name, v] : o.members)
    if (name == k)
      return &v;
  return nullptr;
}

} // namespace

std::map<std::string, HostTensor> stretto::loadSafetensors(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8)
    throw std::runtime_error(path + ": truncated: " + std::to_string(bytes.size()) +
                             " bytes (a safetensors file starts with an 8-byte header length)");
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  if (len > bytes.size() - 8)
    throw std::runtime_error(path + ": truncated: the header says " + std::to_string(len) +
                             " bytes, the file holds " + std::to_string(bytes.size() - 8) +
                             " after the length (or it is not a safetensors file)");
  std::string header = bytes.substr(8, len);
  const size_t base = 8 + len, dataBytes = bytes.size() - base;
  JsonValue root;
  try {
    JsonReader r{header};
    root = r.value();
  } catch (const std::exception &e) {
    throw std::runtime_error(path + ": not a safetensors file: " + e.what());
  }
  if (root.kind != JsonValue::Object)
    throw std::runtime_error(path + ": not a safetensors file: the header is not a JSON object");
  std::map<std::string, HostTensor> out;
  for (const auto &[name, v] : root.members) {
    if (name == "__metadata__")
      continue;
    const std::string where = path + ": tensor '" + name + "'";
    const JsonValue *dtype = member(v, "dtype"), *shape = member(v, "shape"),
                    *offsets = member(v, "data_offsets");
    if (!dtype || dtype->kind != JsonValue::String || !shape ||
        shape->kind != JsonValue::Array || !offsets || offsets->kind != JsonValue::Array ||
        offsets->items.size() != 2)
      throw std::runtime_error(where + " lacks dtype, shape or data_offsets");
    size_t width = dtype->text == "F32" ? 4 : dtype->text == "F64" ? 8 : 0;
    if (!width)
      throw std::runtime_error(where + " has dtype " + dtype->text +
                               "; parameters are read as F32 or F64");
    HostTensor t;
    uint64_t count = 1;
    for (const JsonValue &d : shape->items) {
      if (d.kind != JsonValue::Number || d.number < 0 || d.number > 1e15)
        throw std::runtime_error(where + " has a bad shape");
      t.shape.push_back(static_cast<int64_t>(d.number));
      count *= static_cast<uint64_t>(d.number);
    }
    if (offsets->items[0].kind != JsonValue::Number || offsets->items[1].kind != JsonValue::Number)
      throw std::runtime_error(where + " has bad data_offsets");
    double b = offsets->items[0].number, e = offsets->items[1].number;
    if (b < 0 || e < b)
      throw std::runtime_error(where + " has bad data_offsets");
    if (e > static_cast<double>(dataBytes))
      throw std::runtime_error(path + ": truncated: tensor '" + name + "' ends at data byte " +
                               std::to_string(static_cast<uint64_t>(e)) + ", the file holds " +
                               std::to_string(dataBytes));
    uint64_t begin = static_cast<uint64_t>(b), end = static_cast<uint64_t>(e);
    if (end - begin != count * width)
      throw std::runtime_error(where + " holds " + std::to_string(end - begin) +
                               " bytes; its shape " + shapeToString(t.shape) + " and dtype " +
                               dtype->text + " need " + std::to_string(count * width));
    t.data.resize(count);
    const char *p = bytes.data() + base + begin;
    for (uint64_t k = 0; k < count; ++k) {
      if (width == 4) {
        float x;
        std::memcpy(&x, p + 4 * k, 4);
        t.data[k] = x;
      } else {
        double x;
        std::memcpy(&x, p + 8 * k, 8);
        t.data[k] = x;
      }
    }
    if (!out.emplace(name, std::move(t)).second)
      throw std::runtime_error(where + " appears twice");
  }
  return out;
}

std::string stretto::sampleText(const Graph &forward,
                                const std::map<std::string, HostTensor> &params,
                                const std::string &prompt, int64_t count, double temperature,
                                uint64_t seed) {
  int logitsNode = -1, tokensNode = -1;
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const Node &n = forward.nodes[i];
    if (n.kind == OpKind::CrossEntropy)
      logitsNode = n.operands[0];
    if (n.kind == OpKind::Input && n.name == "tokens")
      tokensNode = static_cast<int>(i);
  }
  if (logitsNode < 0 || tokensNode < 0)
    throw std::runtime_error("sampling needs a language model (tokens input, cross-entropy loss)");
  const Shape &ts = forward.nodes[tokensNode].shape;
  const Shape &ls = forward.nodes[logitsNode].shape;
  int64_t B = ts[0], T = ts[1], V = ls.back();
  // The compiled runtime's own ops run the forward graph (no kernels needed)
  // and evaluate only what the logits need; the reference where it cannot.
  std::unique_ptr<Executor> exec;
  std::string why;
  if (PlanExecutor::supports(forward, why))
    exec = std::make_unique<PlanExecutor>(forward, std::map<std::string, PlanExecutor::KernelFn>{});
  else
    exec = std::make_unique<RefExecutor>(forward, Precision::F32);
  Executor &ex = *exec;
  ex.initialize(0);
  for (const StateDecl &s : forward.states) {
    auto it = params.find(s.name);
    if (it == params.end())
      throw std::runtime_error("the checkpoint has no parameter '" + s.name + "'");
    ex.setState(s.name, it->second);
  }
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  std::string generated;
  for (int64_t k = 0; k < count; ++k) {
    int64_t n = std::min<int64_t>(T, static_cast<int64_t>(text.size()));
    HostTensor tokens{{B, T}, std::vector<double>(B * T, 0.0)};
    for (int64_t t = 0; t < n; ++t)
      tokens.data[t] = static_cast<unsigned char>(text[text.size() - n + t]) % V;
    HostTensor targets{{B, T}, std::vector<double>(B * T, 0.0)};
    StepResult r = ex.evaluate({{"tokens", tokens}, {"targets", targets}}, {logitsNode});
    const std::vector<double> &logits = r.probes.at(logitsNode).data;
    const double *row = logits.data() + (n - 1) * V; // batch row 0
    int64_t next = 0;
    if (temperature <= 0) {
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[next])
          next = v;
    } else {
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v)
        mx = std::max(mx, row[v]);
      std::vector<double> p(V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v)
        sum += p[v] = std::exp((row[v] - mx) / temperature);
      double u = unitOpenClosed(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(k)))) * sum;
      for (next = 0; next < V - 1 && (u -= p[next]) > 0; ++next) {
      }
    }
    text += static_cast<char>(next);
    generated += static_cast<char>(next);
  }
  return generated;
}
