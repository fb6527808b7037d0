// tokenizer.json post-processors (what add_special_tokens adds).
#include "core/tokenizer/hf_pipeline.hpp"

namespace oslo {
namespace tok {
namespace hf {
struct TemplatePost : PostProcessor {
  // Ids before and after the sequence.
  std::vector<int64_t> before, after;
  void process(std::vector<int64_t>& ids) const override {
    ids.insert(ids.begin(), before.begin(), before.end());
    ids.insert(ids.end(), after.begin(), after.end());
  }
};

struct SequencePost : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> items;
  void process(std::vector<int64_t>& ids) const override {
    for (auto& p : items) p->process(ids);
  }
};

struct NoPost : PostProcessor {
  void process(std::vector<int64_t>&) const override {}
};

struct SpecialPair {
  std::string token;
  int32_t id;
};

SpecialPair parse_pair(const Parser& P, const json& o, const char* key, const std::string& where) {
  const json& v = P.need(o, key, where);
  const std::string w = where + "." + key;
  if (!v.is_array() || v.size() != 2) P.bad(w, "expected [token, id]");
  return {P.string(v[0], w + "[0]"), P.id(v[1], w + "[1]")};
}

std::unique_ptr<PostProcessor> parse_post(const Parser& P, const json& j, const std::string& where,
                                          int64_t* cls, int64_t* sep, int depth) {
  if (depth > 8) P.bad(where, "post-processors nested too deeply");
  const std::string t = P.type(j, where);
  if (t == "ByteLevel") return std::make_unique<NoPost>();
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    auto p = std::make_unique<TemplatePost>();
    SpecialPair c = parse_pair(P, j, "cls", where), s = parse_pair(P, j, "sep", where);
    p->before.push_back(c.id);
    p->after.push_back(s.id);
    *cls = c.id;
    *sep = s.id;
    return p;
  }
  if (t == "TemplateProcessing") {
    auto p = std::make_unique<TemplatePost>();
    const json& single = P.array(P.need(j, "single", where), where + ".single");
    const json* specials = P.get(j, "special_tokens");
    if (specials) P.object(*specials, where + ".special_tokens");
    bool seen_seq = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string w = where + ".single[" + std::to_string(i) + "]";
      const json& item = P.object(single[i], w);
      if (const json* seq = P.get(item, "Sequence")) {
        P.object(*seq, w + ".Sequence");
        std::string sid = P.string(*seq, "id", w + ".Sequence");
        if (sid != "A") P.bad(w, "the single template may only use sequence A, not ", quote(sid));
        if (seen_seq) P.bad(w, "sequence A appears twice");
        seen_seq = true;
      } else if (const json* sp = P.get(item, "SpecialToken")) {
        P.object(*sp, w + ".SpecialToken");
        std::string name = P.string(*sp, "id", w + ".SpecialToken");
        if (!specials || !specials->contains(name))
          P.bad(w, "special token ", quote(name), " is not in special_tokens");
        const json& st = P.object((*specials)[name], where + ".special_tokens." + name);
        const json& ids = P.array(P.need(st, "ids", where + ".special_tokens." + name),
                                  where + ".special_tokens." + name + ".ids");
        for (size_t k = 0; k < ids.size(); ++k) {
          int32_t id = P.id(ids[k], where + ".special_tokens." + name + ".ids");
          (seen_seq ? p->after : p->before).push_back(id);
        }
      } else {
        P.bad(w, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_seq) P.bad(where + ".single", "the template has no sequence A");
    return p;
  }
  if (t == "Sequence") {
    auto p = std::make_unique<SequencePost>();
    const json& items = P.array(P.need(j, "processors", where), where + ".processors");
    for (size_t i = 0; i < items.size(); ++i)
      p->items.push_back(parse_post(P, items[i], where + ".processors[" + std::to_string(i) + "]",
                                    cls, sep, depth + 1));
    return p;
  }
  if (known_unsupported(t)) P.unsupported(where, "post-processor ", quote(t));
  P.bad(where, "unknown post_processor type ", quote(t));
}

}  // namespace hf
}  // namespace tok
}  // namespace oslo
