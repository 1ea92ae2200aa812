#include "core/tensor/portable_math.h"

#include <cmath>
#include <limits>

namespace zerosim {
namespace {

// ln 2 and pi/2 split so that k * high is exact for the k that occur (fdlibm's constants).
constexpr double kLn2High = 6.93147180369123816490e-01;
constexpr double kLn2Low = 1.90821492927058770002e-10;
constexpr double kInverseLn2 = 1.44269504088896338700e+00;
constexpr double kHalfPiHigh = 1.57079632673412561417e+00;
constexpr double kHalfPiLow = 6.07710050650619224932e-11;
constexpr double kTwoOverPi = 6.36619772367581382433e-01;

constexpr double inverse_factorial(int n) {
  double value = 1.0;
  for (int i = 2; i <= n; ++i) value = value / static_cast<double>(i);
  return value;
}

}  // namespace

double portable_exp(double x) {
  if (x != x) return x;
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
  if (x < -745.1332191019412) return 0.0;
  const double k = std::nearbyint(x * kInverseLn2);
  const double reduced = (x - k * kLn2High) - k * kLn2Low;  // |reduced| <= ~0.35
  // Taylor series to degree 14 in Horner form: the next term is below 1e-19.
  double sum = inverse_factorial(14);
  for (int n = 13; n >= 0; --n) sum = sum * reduced + inverse_factorial(n);
  return std::ldexp(sum, static_cast<int>(k));
}

double portable_log(double x) {
  if (x != x) return x;
  if (x < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0.0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int exponent = 0;
  double mantissa = std::frexp(x, &exponent);  // [0.5, 1)
  if (mantissa < 0.70710678118654752440) {
    mantissa = mantissa * 2.0;
    exponent -= 1;
  }
  // log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| <= 0.172.
  const double s = (mantissa - 1.0) / (mantissa + 1.0);
  const double s_squared = s * s;
  double series = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) series = series * s_squared + 1.0 / static_cast<double>(2 * k + 1);
  const double log_mantissa = 2.0 * s * series;
  const double e = static_cast<double>(exponent);
  return e * kLn2High + (e * kLn2Low + log_mantissa);
}

double portable_cos(double x) {
  if (!(std::fabs(x) <= 1e9)) {
    if (x != x || std::isinf(x)) return std::numeric_limits<double>::quiet_NaN();
  }
  const double k = std::nearbyint(x * kTwoOverPi);
  const double reduced = (x - k * kHalfPiHigh) - k * kHalfPiLow;  // |reduced| <= ~pi/4
  const double r2 = reduced * reduced;
  // cos and sin of the reduced argument by Taylor series (next terms below 1e-20).
  double cosine = inverse_factorial(20);
  for (int n = 18; n >= 0; n -= 2) cosine = cosine * (-r2) + inverse_factorial(n);
  // inverse_factorial alternates sign through (-r2): cos = sum (-1)^j r^2j / (2j)!
  double sine = inverse_factorial(21);
  for (int n = 19; n >= 1; n -= 2) sine = sine * (-r2) + inverse_factorial(n);
  sine = sine * reduced;
  const long long quadrant = (static_cast<long long>(k) % 4 + 4) % 4;
  switch (quadrant) {
    case 0: return cosine;
    case 1: return -sine;
    case 2: return -cosine;
    default: return sine;
  }
}

}  // namespace zerosim
