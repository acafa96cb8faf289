// Loading the configuration: TOML text and files, and the command line
// (one flag per key of the table in config_keys.cc).
#include "core/config.h"

#include "core/version.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tierkv {
namespace {

std::string toml_node_text(const toml::node& node) {
  if (auto s = node.value<std::string>()) return *s;
  if (auto b = node.value_exact<bool>()) return *b ? "yes" : "no";
  if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = node.value_exact<double>()) return fmt::format("{}", *d);
  return "";
}

// A TOML array of strings is the list form of a comma-separated value.
std::optional<std::string> toml_array_text(const toml::node& node) {
  const toml::array* a = node.as_array();
  if (!a) return std::nullopt;
  std::string out;
  for (const toml::node& item : *a) {
    std::optional<std::string> s = item.value<std::string>();
    if (!s) return std::nullopt;
    out += (out.empty() ? "" : ",") + *s;
  }
  return out;
}

Status apply_table(Config& config, const toml::table& table, const std::string& origin) {
  for (const auto& [k, node] : table) {
    if (!find_config_key(k.str()))
      return Status::invalid_argument(fmt::format("{}: unknown key '{}'", origin, k.str()));
    if (std::optional<std::string> list = toml_array_text(node)) {
      TIERKV_RETURN_IF_ERROR(config_set(config, k.str(), *list));
      continue;
    }
    if (!node.is_value())
      return Status::invalid_argument(fmt::format("{}: '{}' must be a value", origin, k.str()));
    TIERKV_RETURN_IF_ERROR(config_set(config, k.str(), toml_node_text(node)));
  }
  return Status::ok();
}

}  // namespace

// Debian's toml++ is built with exceptions; they stop here.
Status config_apply_toml_text(Config& config, std::string_view text) {
  try {
    return apply_table(config, toml::parse(text), "config");
  } catch (const toml::parse_error& err) {
    return Status::invalid_argument(
        fmt::format("config line {}: {}", err.source().begin.line, err.description()));
  }
}

Status config_apply_toml_file(Config& config, const std::string& path) {
  try {
    return apply_table(config, toml::parse_file(path), path);
  } catch (const toml::parse_error& err) {
    return Status::invalid_argument(
        fmt::format("{}:{}: {}", path, err.source().begin.line, err.description()));
  }
}

Result<Config> load_config(int argc, const char* const* argv, std::string_view program) {
  Config config;
  CLI::App app{std::string(program)};
  std::string config_path;
  app.add_option("-c,--config", config_path, "TOML configuration file");
  bool print_example = false;
  app.add_flag("--print-example-config", print_example,
               "print a commented TOML file with every key and its default, and exit");
  app.set_version_flag("-v,--version", std::string(program) + " " + std::string(kTierkvVersion) +
                                           " (Redis " + std::string(kRedisCompatVersion) +
                                           " compatible)");
  const std::vector<ConfigKey>& keys = config_keys();
  std::vector<std::string> flag_values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string shown = *config_get_human(config, keys[i].name);
    app.add_option(
           "--" + std::string(keys[i].name), flag_values[i],
           std::string(keys[i].help) + " (default " + (shown.empty() ? "none" : shown) + ")")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as redis-server: last wins
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Status::unavailable(app.help());
  } catch (const CLI::CallForVersion& e) {
    return Status::unavailable(e.what());
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument(e.what());
  }
  // Like --help: the text is the status message, printed and exit 0.
  if (print_example) return Status::unavailable(config_example_toml());
  if (!config_path.empty()) TIERKV_RETURN_IF_ERROR(config_apply_toml_file(config, config_path));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (app.count("--" + std::string(keys[i].name)) == 0) continue;
    TIERKV_RETURN_IF_ERROR(config_set(config, keys[i].name, flag_values[i]));
  }
  TIERKV_RETURN_IF_ERROR(config_validate(config));
  return config;
}

}  // namespace tierkv
