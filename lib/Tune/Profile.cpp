//===- Profile.cpp - measured unit costs, cached on disk ------------------===//
#include "stretto/Tune/Profile.h"
#include "stretto/Support/Text.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

using namespace stretto::tune;

namespace {

uint64_t fnv(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

} // namespace

std::string stretto::tune::profileText(const Profile &p) {
  std::string out = "stretto-profile 1\n";
  for (const auto &[k, v] : p.key)
    out += "key " + k + " " + std::to_string(v.size()) + ":" + v + "\n";
  out += "steps " + std::to_string(p.steps) + "\n";
  for (const UnitProfile &u : p.units) {
    out += "unit " + u.name;
    for (double v : {u.forward, u.backward, u.update, u.paramBytes, u.optimizerBytes,
                     u.stashBytes, u.cutBytes})
      out += " " + stretto::exactDecimal(v);
    out += "\n";
  }
  out += "checksum " + stretto::hex64(fnv(out)) + "\n";
  return out;
}

Profile stretto::tune::parseProfile(const std::string &text, const std::string &name) {
  Profile p;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  size_t offset = 0; // bytes before the current line
  auto fail = [&](const std::string &what) {
    throw std::runtime_error(name + ":" + std::to_string(lineNo) + ": " + what);
  };
  bool sawChecksum = false;
  while (std::getline(in, line)) {
    ++lineNo;
    size_t lineStart = offset;
    offset += line.size() + 1;
    if (sawChecksum)
      fail("text after the checksum line");
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (lineNo == 1) {
      if (line != "stretto-profile 1")
        fail("not a stretto profile (expected \"stretto-profile 1\")");
      continue;
    }
    if (tag == "key") {
      std::string k;
      ls >> k;
      std::string rest;
      std::getline(ls, rest);
      size_t colon = rest.find(':');
      if (k.empty() || rest.size() < 2 || colon == std::string::npos)
        fail("malformed key line");
      size_t len = 0;
      try {
        len = std::stoul(rest.substr(1, colon - 1));
      } catch (...) {
        fail("malformed key length");
      }
      std::string v = rest.substr(colon + 1);
      if (v.size() != len)
        fail("key '" + k + "' has " + std::to_string(v.size()) + " bytes, expected " +
             std::to_string(len));
      p.key[k] = v;
    } else if (tag == "steps") {
      if (!(ls >> p.steps) || p.steps < 1)
        fail("malformed steps line");
    } else if (tag == "unit") {
      UnitProfile u;
      double *f[] = {&u.forward, &u.backward, &u.update, &u.paramBytes,
                     &u.optimizerBytes, &u.stashBytes, &u.cutBytes};
      ls >> u.name;
      for (double *x : f)
        if (!(ls >> *x) || !(*x >= 0) || *x == std::numeric_limits<double>::infinity())
          fail("malformed unit line (expected a name and 7 finite numbers >= 0)");
      std::string extra;
      if (ls >> extra)
        fail("unexpected '" + extra + "' at the end of a unit line");
      p.units.push_back(u);
    } else if (tag == "checksum") {
      std::string sum;
      ls >> sum;
      if (sum != stretto::hex64(fnv(text.substr(0, lineStart))))
        fail("checksum mismatch: the file was edited or truncated");
      sawChecksum = true;
    } else {
      fail("unknown line '" + tag + "'");
    }
  }
  if (lineNo == 0)
    throw std::runtime_error(name + ": empty profile");
  if (!sawChecksum)
    fail("no checksum line: the file is truncated");
  if (p.units.empty())
    fail("the profile has no units");
  return p;
}

Profile stretto::tune::loadProfile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error(path + ": cannot read the profile");
  std::stringstream ss;
  ss << f.rdbuf();
  return parseProfile(ss.str(), path);
}

void stretto::tune::saveProfile(const std::string &path, const Profile &p) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << profileText(p);
    if (!f.flush())
      throw std::runtime_error(tmp + ": cannot write the profile");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot write the profile");
  }
}

std::string stretto::tune::profileCachePath(const std::string &dir,
                                            const std::map<std::string, std::string> &key) {
  std::string id;
  for (const auto &[k, v] : key)
    if (k != "kernels")
      id += k + "=" + v + "\n";
  return dir + "/" + stretto::hex64(fnv(id)) + ".profile";
}

CacheLookup stretto::tune::lookupProfile(const std::string &dir,
                                         const std::map<std::string, std::string> &key) {
  CacheLookup r;
  std::string path = profileCachePath(dir, key);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return r; // Missing
  try {
    r.profile = loadProfile(path);
  } catch (const std::exception &e) {
    r.status = CacheLookup::Corrupt;
    r.why = e.what();
    return r;
  }
  for (const auto &[k, v] : key) {
    auto it = r.profile.key.find(k);
    if (it == r.profile.key.end() || it->second != v) {
      r.status = CacheLookup::Stale;
      r.why = path + ": measured for " + k + " '" +
              (it == r.profile.key.end() ? std::string("(none)") : it->second) + "', now '" + v +
              "'";
      return r;
    }
  }
  if (r.profile.key.size() != key.size()) {
    r.status = CacheLookup::Stale;
    r.why = path + ": the entry has keys this version does not use";
    return r;
  }
  r.status = CacheLookup::Hit;
  return r;
}
