// The suite report: JSON, HTML, Markdown and JUnit from one run, with a real failing verdict
// (a library scenario with a defect switched on). The HTML page is rendered by headless
// Chromium (Debian's chromium package, installed by scripts/install-deps.sh) and the
// screenshot is decoded and checked: the page is drawn, the reference curve, the resumed run
// and the crash marker are on it in their colors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "reports/suite_report.h"
#include "tests/test_directory.h"

namespace zerosim {
namespace {

SuiteReport failing_and_passing_report() {
  SuiteReport report;
  report.title = "zerosim suite <library> & co";
  report.defects = {"scheduler_not_restored"};
  for (const bool with_defect : {true, false}) {
    const std::string path = std::string(ZEROSIM_SCENARIO_LIBRARY_DIR) + "/seed_resume_after_swap_directory_deleted.json";
    Result<Scenario> scenario = read_scenario_file(path);
    EXPECT_TRUE(scenario.ok()) << scenario.status().to_string();
    if (!scenario.ok()) return report;
    Result<ScenarioVerdict> verdict =
        run_scenario(*scenario, with_defect ? DefectSet{Defect::kSchedulerNotRestored} : DefectSet{});
    EXPECT_TRUE(verdict.ok()) << verdict.status().to_string();
    if (!verdict.ok()) return report;
    ReportedScenario entry;
    entry.verdict = std::move(verdict).value();
    entry.file = path;
    entry.replay_command = "zerosim run " + path + (with_defect ? " --defect scheduler_not_restored" : "");
    entry.seconds = 0.5;
    report.scenarios.push_back(std::move(entry));
  }
  return report;
}

std::string read_text(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
}

TEST(SuiteReport, EveryFormatCarriesTheVerdictTheDiagnosisAndTheReplayCommand) {
  const SuiteReport report = failing_and_passing_report();
  ASSERT_EQ(report.scenarios.size(), 2u);
  ASSERT_FALSE(report.scenarios[0].verdict.passed);
  ASSERT_TRUE(report.scenarios[1].verdict.passed);
  EXPECT_EQ(report.failed(), 1);

  const nlohmann::json json = report_json(report);
  EXPECT_EQ(json["failed"], 1);
  EXPECT_EQ(json["passed"], 1);
  const nlohmann::json& failed = json["scenarios"][0];
  EXPECT_EQ(failed["divergence"]["component"], "scheduler");
  EXPECT_EQ(failed["element"]["tensor"], "last_batch_iteration");
  EXPECT_EQ(failed["reference_losses"].size(), 6u);
  EXPECT_EQ(failed["resumed_losses"].size(), 2u);
  EXPECT_EQ(failed["resumed_at"], 4);

  const std::string html = report_html(report);
  EXPECT_NE(html.find("<title>zerosim suite &lt;library&gt; &amp; co</title>"), std::string::npos);
  EXPECT_NE(html.find("1 passed, 1 failed"), std::string::npos);
  EXPECT_NE(html.find("class=\"reference\""), std::string::npos);
  EXPECT_NE(html.find("class=\"resumed\""), std::string::npos);
  EXPECT_NE(html.find("class=\"crash\""), std::string::npos);
  EXPECT_NE(html.find("class=\"divergence\""), std::string::npos) << "the divergence is marked on the curve";
  EXPECT_NE(html.find("<td>last_batch_iteration</td>"), std::string::npos) << "the divergence table names the field";
  EXPECT_NE(html.find("--defect scheduler_not_restored"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "the page is self-contained and static";
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg")) << "no external resource";
  // Failures come first on the page.
  EXPECT_LT(html.find("FAIL"), html.find("PASS"));

  const std::string markdown = report_markdown(report);
  EXPECT_NE(markdown.find("1 failed"), std::string::npos);
  EXPECT_NE(markdown.find("| ❌ | seed: resume after the swap directory is deleted | after load (step 4): scheduler"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("<pre>zerosim run "), std::string::npos) << "the replay command in a code block";
  EXPECT_NE(markdown.find("### zerosim suite &lt;library&gt; &amp; co"), std::string::npos) << markdown;

  TestDirectory directory;
  ASSERT_TRUE(write_report_directory(directory.path() + "/report", report).ok());
  for (const char* file : {"report.json", "report.html", "report.md", "junit.xml"}) {
    EXPECT_FALSE(read_text(directory.path() + "/report/" + file).empty()) << file;
  }
  EXPECT_EQ(nlohmann::json::parse(read_text(directory.path() + "/report/report.json")), json);
  EXPECT_NE(read_text(directory.path() + "/report/junit.xml").find("failures=\"1\""), std::string::npos);
}

TEST(SuiteReport, AnUnwritableReportDirectoryIsAnErrorNamingIt) {
  TestDirectory directory;
  const std::string blocker = directory.path() + "/file";
  std::ofstream(blocker) << "x";
  const Status status = write_report_directory(blocker + "/report", SuiteReport{});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(blocker + "/report"), std::string::npos) << status.to_string();
}

// A minimal PNG reader for the screenshot: 8-bit RGB or RGBA, not interlaced (what Chromium
// writes), all five row filters.
struct Image {
  int width = 0, height = 0;
  std::vector<std::array<uint8_t, 3>> pixels;
};

uint32_t big_endian_u32(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | bytes[3];
}

std::optional<Image> decode_png(const std::string& file, std::string& why) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
  if (file.size() < 8 || std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) != 0) {
    why = "not a PNG";
    return std::nullopt;
  }
  Image image;
  int channels = 0;
  std::vector<uint8_t> compressed;
  for (size_t at = 8; at + 12 <= file.size();) {
    const uint32_t length = big_endian_u32(bytes + at);
    const std::string type(file.data() + at + 4, 4);
    const uint8_t* data = bytes + at + 8;
    if (at + 12 + length > file.size()) break;
    if (type == "IHDR") {
      image.width = static_cast<int>(big_endian_u32(data));
      image.height = static_cast<int>(big_endian_u32(data + 4));
      if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0) {
        why = "unsupported PNG layout";
        return std::nullopt;
      }
      channels = data[9] == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    }
    at += 12 + length;
  }
  const size_t stride = static_cast<size_t>(image.width) * static_cast<size_t>(channels);
  std::vector<uint8_t> raw((stride + 1) * static_cast<size_t>(image.height));
  uLongf raw_size = raw.size();
  if (channels == 0 || uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK ||
      raw_size != raw.size()) {
    why = "the image data does not inflate to " + std::to_string(raw.size()) + " bytes";
    return std::nullopt;
  }
  std::vector<uint8_t> previous(stride, 0), row(stride);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t* line = raw.data() + static_cast<size_t>(y) * (stride + 1);
    const uint8_t filter = line[0];
    for (size_t i = 0; i < stride; ++i) {
      const int left = i >= static_cast<size_t>(channels) ? row[i - static_cast<size_t>(channels)] : 0;
      const int up = previous[i];
      const int up_left = i >= static_cast<size_t>(channels) ? previous[i - static_cast<size_t>(channels)] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = left; break;
        case 2: predictor = up; break;
        case 3: predictor = (left + up) / 2; break;
        case 4: {
          const int estimate = left + up - up_left;
          const int to_left = std::abs(estimate - left), to_up = std::abs(estimate - up),
                    to_up_left = std::abs(estimate - up_left);
          predictor = (to_left <= to_up && to_left <= to_up_left) ? left : (to_up <= to_up_left ? up : up_left);
          break;
        }
        default: why = "bad row filter"; return std::nullopt;
      }
      row[i] = static_cast<uint8_t>(line[1 + i] + predictor);
    }
    for (int x = 0; x < image.width; ++x) {
      const uint8_t* pixel = row.data() + static_cast<size_t>(x) * static_cast<size_t>(channels);
      image.pixels.push_back({pixel[0], pixel[1], pixel[2]});
    }
    std::swap(previous, row);
  }
  return image;
}

// The box around every pixel of the plots' background (#fbfcfd, the SVG frame's fill): the
// colours are counted inside it, so that the legend and the section borders do not count.
struct Box {
  int left = 1 << 30, top = 1 << 30, right = -1, bottom = -1;
};

Box plot_box(const Image& image) {
  Box box;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      const auto& pixel = image.pixels[static_cast<size_t>(y) * static_cast<size_t>(image.width) + static_cast<size_t>(x)];
      if (pixel[0] == 0xfb && pixel[1] == 0xfc && pixel[2] == 0xfd) {
        box.left = std::min(box.left, x), box.right = std::max(box.right, x);
        box.top = std::min(box.top, y), box.bottom = std::max(box.bottom, y);
      }
    }
  }
  return box;
}

int64_t pixels_near(const Image& image, uint32_t rgb, const Box& box) {
  const int red = static_cast<int>(rgb >> 16), green = static_cast<int>((rgb >> 8) & 0xff), blue = static_cast<int>(rgb & 0xff);
  int64_t count = 0;
  for (int y = std::max(box.top, 0); y <= box.bottom; ++y) {
    for (int x = std::max(box.left, 0); x <= box.right; ++x) {
    const auto& pixel = image.pixels[static_cast<size_t>(y) * static_cast<size_t>(image.width) + static_cast<size_t>(x)];
    // Antialiased strokes blend into the background; their centre pixels keep the stroke color.
    if (std::abs(pixel[0] - red) <= 12 && std::abs(pixel[1] - green) <= 12 && std::abs(pixel[2] - blue) <= 12) ++count;
    }
  }
  return count;
}

TEST(SuiteReport, TheHtmlPageRendersInHeadlessChromiumWithItsCurvesAndMarkers) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it; CI runs this test)";
  }
  TestDirectory directory;
  const SuiteReport report = failing_and_passing_report();
  ASSERT_TRUE(write_report_directory(directory.path(), report).ok());
  const std::string screenshot = directory.path() + "/report.png";
  const std::string command = "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,1400 "
                              "--user-data-dir=" + directory.path() + "/profile --screenshot=" + screenshot +
                              " file://" + directory.path() + "/report.html > " + directory.path() +
                              "/chromium.log 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(directory.path() + "/chromium.log");
  std::string why;
  const std::optional<Image> image = decode_png(read_text(screenshot), why);
  ASSERT_TRUE(image.has_value()) << why << "\n" << read_text(directory.path() + "/chromium.log");
  EXPECT_EQ(image->width, 1000);
  EXPECT_EQ(image->height, 1400);
  // Inside the plots (both sections' charts and what lies between them), colours from the
  // page's style sheet: the reference curves, the resumed runs, the crash lines and the
  // divergence circle. A page that failed to render has no plot box at all.
  const Box box = plot_box(*image);
  ASSERT_GE(box.right - box.left, 400) << "no plot on the screenshot";
  ASSERT_GE(box.bottom - box.top, 100) << "no plot on the screenshot";
  const int64_t blue = pixels_near(*image, 0x0969da, box);
  const int64_t orange = pixels_near(*image, 0xbf8700, box);
  const int64_t red = pixels_near(*image, 0xcf222e, box);
  EXPECT_GT(blue, 600) << "the reference curves (blue) are not drawn";
  EXPECT_GT(orange, 100) << "the resumed runs (orange) are not drawn";
  EXPECT_GT(red, 300) << "the crash lines and the divergence circle (red) are not drawn";
  EXPECT_GT(pixels_near(*image, 0x1b1f24, Box{0, 0, image->width - 1, image->height - 1}), 500) << "no text";
  std::printf("plot box %d,%d-%d,%d: blue %lld, orange %lld, red %lld pixels\n", box.left, box.top, box.right, box.bottom,
              static_cast<long long>(blue), static_cast<long long>(orange), static_cast<long long>(red));
}

}  // namespace
}  // namespace zerosim
